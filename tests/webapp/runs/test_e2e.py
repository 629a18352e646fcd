"""A real 2-step run of the tiny model on the demo problems through a real Celery worker process."""
import asyncio
import json
import time

import pytest

from webapp.accounts.models import ApiToken
from webapp.runs.models import Candidate, Checkpoint, Eval, Run, RunEvent, StepMetric
from webapp.runs.services import create_run

from tests.factories import DEMO, make_problem_set

from .conftest import demo_config


async def collect_events(base_url: str, run_id: int, token: str, timeout: float) -> list[dict]:
    import websockets

    url = base_url.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
    headers = {"Authorization": f"Bearer {token}", "Origin": base_url}
    events = []
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        async def read():
            async for raw in ws:
                events.append(json.loads(raw))
                if events[-1].get("event") == "done":
                    return
        await asyncio.wait_for(read(), timeout)
    return events


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("model, architecture", [("models/tiny", "Qwen3ForCausalLM"),
                                                 ("models/tiny-qwen3_5", "Qwen3_5ForCausalLM")],
                         ids=["qwen3", "qwen3_5"])
def test_a_real_short_run_streams_to_the_database_and_a_websocket(celery_worker, live_server_url, user,
                                                                   models_dir, settings, client, model,
                                                                   architecture):
    settings.MODELS_DIR = models_dir  # the presets' models/tiny* are the session's tiny models
    problem_set = make_problem_set(user, "demo", DEMO.read_bytes())
    token = ApiToken.issue(user, "e2e")[1]
    run = create_run(user, "e2e run", problem_set, demo_config(steps=2, model=model))

    events = asyncio.run(collect_events(live_server_url, run.pk, token, timeout=600))

    kinds = [e["event"] for e in events if e["event"] != "status"]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("step") == 2
    assert "problem" in kinds and "eval" in kinds and "checkpoint" in kinds
    seqs = [e["seq"] for e in events if "seq" in e]
    assert seqs == sorted(set(seqs))  # in order, never twice
    deadline = time.monotonic() + 30
    while Run.objects.get(pk=run.pk).status != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.2)
    run.refresh_from_db()
    assert run.status == "succeeded", (run.status, run.error)
    assert run.step == 2
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    assert "reward/mean" in StepMetric.objects.get(run=run, step=2).metrics
    assert Candidate.objects.filter(run=run, phase="train").count() == 2 * 2 * 2
    # Every evaluation (steps 0, 1 and 2) records each held-out problem's one sample.
    heldout = problem_set.problems.filter(split="heldout").count()
    assert Candidate.objects.filter(run=run, phase="eval").count() == 3 * heldout
    assert set(Candidate.objects.filter(run=run, phase="eval").values_list("step", flat=True)) == {0, 1, 2}
    assert Eval.objects.filter(run=run, step=0, split="heldout").exists()
    checkpoint = Checkpoint.objects.filter(run=run).order_by("-step").first()
    assert checkpoint.kind == "adapter" and checkpoint.size_bytes > 0
    assert (run.path / checkpoint.path / "adapter_config.json").exists()
    assert RunEvent.objects.filter(run=run).count() == len(seqs)
    start = RunEvent.objects.filter(run=run, kind="start").first().payload
    assert start["runtime"]["architecture"] == architecture
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert architecture in page  # the run page's runtime block
