"""A run on a problem set that brings its own packages: its candidates execute in the set's environment.

The prompts hold a whole numpy solution ending in a comment and the tiny model adds one token, so a
candidate that compiles passes exactly when `numpy` imports in the sandbox."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.training.conftest import tiny_run_config
from training.events import read_events
from training.trainer import train

SOLVED = "import numpy as np\n\ndef total(xs):\n    return int(np.sum(np.asarray(xs)))  # "
PROBLEMS = [{"id": f"np-total-{k}", "kind": "function", "entry_point": "total", "prompt": SOLVED,
             "tests": [f"assert total([{k}, 2]) == {k + 2}"], "time_limit_s": 10.0, "memory_limit_mb": 512}
            for k in range(2)]


@pytest.fixture
def env_cache(monkeypatch):
    path = tempfile.mkdtemp(prefix="crucible-envs-test-")  # readable by the sandbox user
    os.chmod(path, 0o755)
    monkeypatch.setenv("CRUCIBLE_ENV_DIR", path)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def statuses(run_dir: Path) -> list[str]:
    return [c["result"]["status"] for e in read_events(run_dir / "events.jsonl") if e["event"] == "problem"
            for c in e["candidates"]]


@pytest.mark.parametrize("with_environment", [True, False])
def test_a_numpy_set_trains_in_its_environment_and_not_without_it(tmp_path, qwen3_model_dir, env_cache,
                                                                 with_environment):
    header = [{"environment": {"python_packages": ["numpy==2.*"]}}] if with_environment else []
    problems = tmp_path / "numpy.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in header + PROBLEMS))
    cfg = tiny_run_config(qwen3_model_dir, problems, sampling={"max_new_tokens": 1, "stop": []},
                          train={"steps": 1, "eval_every": 0, "eval_samples": 1, "checkpoint_every": 0})
    assert train(cfg, tmp_path / "run", progress=False) == "succeeded"
    ran = [s for s in statuses(tmp_path / "run") if s != "syntax_error"]
    assert ran, "no candidate compiled: nothing was executed"
    built = [d for d in os.listdir(env_cache) if (env_cache / d / "crucible-env.json").exists()]
    if with_environment:
        assert set(ran) == {"passed"}
        assert len(built) == 1
        manifest = json.loads((env_cache / built[0] / "crucible-env.json").read_text())
        assert any(name.startswith("numpy-2.") for name in manifest["installed"])
    else:
        assert set(ran) == {"error"}  # ModuleNotFoundError before the tests
        assert built == []
