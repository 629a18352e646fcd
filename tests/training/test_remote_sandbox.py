"""A training run whose sandbox is two `python -m sandbox serve` replicas (separate processes started
here): the local pool's verdicts, no lost or doubled result when one replica dies mid-step, and a
clear failure when every replica is gone."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from sandbox.remote import RemoteRunner
from tests.sandbox.replicas import TOKEN, replicas
from tests.training.conftest import PROBLEMS, tiny_run_config
from training.config import ConfigError
from training.events import read_events
from training.trainer import train

pytestmark = pytest.mark.e2e  # runs train against `python -m sandbox serve` replicas

# Every execution sleeps in the setup (after the candidate, before the tests): a step lasts long
# enough for a replica to be killed while it holds candidates. Each prompt is a whole function (right
# for add and neg, wrong for sub) ending in an open comment, and completions stop at a line break, so
# whatever the random tiny model writes stays in the comment: every candidate compiles and is executed
# by the replicas (a syntax error would be judged without running, and no replica would ever be busy).
BODIES = {"add": "return a + b", "sub": "return a + b", "neg": "return -a"}
SLOW = [{**p, "prompt": p["prompt"] + f"    {BODIES[p['id']]}  #", "setup": "import time\ntime.sleep(0.4)\n"}
        for p in PROBLEMS if p["split"] == "train"]


@pytest.fixture(scope="module")
def slow_problems(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("problems") / "slow.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in SLOW))
    return path


def verdicts(run_dir: Path) -> list[tuple]:
    """(problem, code, status, per-test passes) of every candidate of every step, in order."""
    out = []
    for e in read_events(run_dir / "events.jsonl"):
        if e["event"] == "problem":
            for c in e["candidates"]:
                out.append((e["step"], e["problem_id"], c["code"], c["result"]["status"],
                            tuple(t["passed"] for t in c["result"]["tests"])))
    return out


def run(model_dir: Path, problems: Path, out: Path, endpoints=(), runner=None) -> str:
    cfg = tiny_run_config(model_dir, problems, sandbox={"workers": 2, "endpoints": list(endpoints)},
                          sampling={"stop": ["\n", "\r"]})
    return train(cfg, out, progress=False, runner=runner)


@pytest.fixture(scope="module")
def local_verdicts(tmp_path_factory, qwen3_model_dir, slow_problems) -> list[tuple]:
    out = tmp_path_factory.mktemp("local")
    assert run(qwen3_model_dir, slow_problems, out) == "succeeded"
    expected = verdicts(out)
    assert len(expected) == 2 * 2 * 4  # steps x problems x candidates
    # executed, not judged without running: right bodies pass, the wrong one fails its tests
    assert {(pid, status) for _, pid, _, status, _ in expected} <= {("add", "passed"), ("neg", "passed"),
                                                                     ("sub", "failed")}
    return expected


def test_a_run_configured_with_two_replicas_gives_the_local_pools_verdicts(tmp_path, qwen3_model_dir, slow_problems,
                                                                         local_verdicts, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", TOKEN)
    with replicas(2) as started:
        status = run(qwen3_model_dir, slow_problems, tmp_path / "remote", [r.url for r in started])
        served = [r.health() for r in started]
    assert status == "succeeded"
    assert verdicts(tmp_path / "remote") == local_verdicts
    assert all(h["busy"] == 0 for h in served)


def test_a_replica_killed_mid_step_loses_and_doubles_no_result(tmp_path, qwen3_model_dir, slow_problems,
                                                               local_verdicts):
    with replicas(2) as (doomed, survivor):
        # One candidate per request, so both replicas hold candidates of the step when one dies.
        runner = RemoteRunner([doomed.url, survivor.url], TOKEN, chunk_per_slot=1)
        killed = threading.Event()

        def kill_when_busy() -> None:
            while not killed.is_set():
                try:
                    if doomed.health()["busy"] > 0:
                        doomed.kill()
                        killed.set()
                except OSError:  # a health check that timed out on a loaded machine: ask again
                    if doomed.proc.poll() is not None:
                        return
                time.sleep(0.02)

        watcher = threading.Thread(target=kill_when_busy, daemon=True)
        watcher.start()
        status = run(qwen3_model_dir, slow_problems, tmp_path / "remote", runner=runner)
        killed.set()
        watcher.join(timeout=30)
        assert doomed.proc.poll() is not None, "the replica was never killed mid-step"
    assert status == "succeeded"
    assert verdicts(tmp_path / "remote") == local_verdicts


def test_a_run_whose_replicas_are_all_gone_fails_naming_them(tmp_path, qwen3_model_dir, slow_problems,
                                                              monkeypatch):
    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", TOKEN)
    with replicas(2) as started:
        urls = [r.url for r in started]
        for r in started:
            r.kill()
        with pytest.raises(Exception) as err:
            run(qwen3_model_dir, slow_problems, tmp_path / "run", urls)
    done = read_events(tmp_path / "run" / "events.jsonl")[-1]
    assert done["event"] == "done" and done["status"] == "failed"
    assert all(url in done["error"] for url in urls), done["error"]
    assert "no sandbox endpoint is left" in str(err.value)


@pytest.mark.parametrize("endpoints,field", [(["localhost:8700"], "sandbox.endpoints[0]"),
                                             (["http://a:1", "http://a:1"], "sandbox.endpoints")])
def test_bad_endpoints_are_config_errors_naming_the_field(tmp_path, endpoints, field):
    with pytest.raises(ConfigError) as err:
        tiny_run_config(tmp_path, tmp_path / "p.jsonl", sandbox={"endpoints": endpoints})
    assert str(err.value).startswith(field)
