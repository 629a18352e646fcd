"""A training run whose sandbox is two `python -m sandbox serve` replicas (separate processes started
here): the local pool's verdicts, no lost or doubled result when one replica dies mid-step, and a
clear failure when every replica is gone."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.sandbox.replicas import TOKEN, replicas
from tests.training.conftest import PROBLEMS, tiny_run_config
from training.config import ConfigError
from training.events import read_events
from training.trainer import train

# Every execution sleeps in the setup (after the candidate, before the tests): a step lasts long
# enough for a replica to be killed while it holds candidates.
SLOW = [{**p, "setup": "import time\ntime.sleep(0.4)\n"} for p in PROBLEMS if p["split"] == "train"]


@pytest.fixture
def slow_problems(tmp_path) -> Path:
    path = tmp_path / "slow.jsonl"
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


def run(model_dir: Path, problems: Path, out: Path, endpoints=()) -> str:
    cfg = tiny_run_config(model_dir, problems, sandbox={"workers": 2, "endpoints": list(endpoints)})
    return train(cfg, out, progress=False)


def test_a_run_on_two_replicas_gives_the_local_pools_verdicts_even_when_one_dies_mid_step(
        tmp_path, qwen3_model_dir, slow_problems, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", TOKEN)
    assert run(qwen3_model_dir, slow_problems, tmp_path / "local") == "succeeded"
    expected = verdicts(tmp_path / "local")
    assert len(expected) == 2 * 2 * 4  # steps x problems x candidates

    with replicas(2) as (doomed, survivor):
        killed = threading.Event()

        def kill_when_busy() -> None:
            while not killed.is_set():
                try:
                    if doomed.health()["busy"] > 0:
                        doomed.kill()
                        killed.set()
                except OSError:
                    return
                time.sleep(0.02)

        watcher = threading.Thread(target=kill_when_busy, daemon=True)
        watcher.start()
        status = run(qwen3_model_dir, slow_problems, tmp_path / "remote", [doomed.url, survivor.url])
        killed.set()
        watcher.join(timeout=30)
        assert doomed.proc.poll() is not None, "the replica was never killed mid-step"
    assert status == "succeeded"
    assert verdicts(tmp_path / "remote") == expected


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
