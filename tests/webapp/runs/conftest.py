"""Fixtures for runs: a real problem set (W1's importer), run dirs under tmp, event lines made by training.events."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from training import events as run_events

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "data" / "demo" / "problems.jsonl"


def problem_lines(n_train: int = 3, n_heldout: int = 1, *, slash: bool = True) -> bytes:
    lines = []
    for i in range(n_train + n_heldout):
        pid = f"HumanEval/{i}" if slash and i == 0 else f"add-{i}"
        lines.append({"id": pid, "kind": "function", "prompt": f"def add{i}(a, b):\n", "entry_point": f"add{i}",
                      "tests": [f"assert add{i}(1, 2) == 3", f"assert add{i}(2, 2) == 4"],
                      "reference_solution": f"def add{i}(a, b):\n    return a + b\n",
                      "split": "train" if i < n_train else "heldout"})
    return "".join(json.dumps(p) + "\n" for p in lines).encode()


def make_problem_set(owner, name="small set", data: bytes | None = None):
    from webapp.problems.services import create_problem_set

    f = io.BytesIO(problem_lines() if data is None else data)
    f.name = "problems.jsonl"
    ps, errors = create_problem_set(owner, name, f, validate=False)
    assert ps is not None, errors
    return ps


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.MODELS_DIR = tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")  # what the web default, models/tiny, names
    install_model_stub(settings.MODELS_DIR / "tiny-qwen3_5")  # the tiny Qwen3.5 demo preset's model
    return settings.RUNS_DIR


def install_model_stub(directory: Path) -> Path:
    """A directory that passes for an installed model (its config.json) where nothing loads it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}")
    return directory


@pytest.fixture
def problem_set(user):
    return make_problem_set(user)


TINY_OVERRIDES = {"train": {"steps": 3}, "sampling": {"problems_per_step": 2, "candidates_per_problem": 2}}


@pytest.fixture
def run(user, problem_set):
    from webapp.runs.services import create_run

    return create_run(user, "first run", problem_set, TINY_OVERRIDES)


def result(status="failed", passed=1, total=2, ran=None, stdout="", stderr=""):
    ran = total if ran is None else ran
    tests = [{"name": f"test {i + 1}", "passed": i < passed, "error": None if i < passed else "AssertionError",
              "time_s": 0.001} for i in range(ran)]
    return {"status": status, "tests_passed": passed, "tests_total": total, "tests": tests, "syntax_ok": True,
            "format_ok": True, "wall_time_s": 0.05, "cpu_time_s": 0.04, "peak_memory_mb": 10.0, "stdout": stdout,
            "stderr": stderr, "stdout_truncated": False, "stderr_truncated": False, "exit_code": 0, "detail": "",
            "isolation": "process", "isolation_features": []}


def _line(event) -> dict:
    """An event (training/events.py) as the trainer's line holds it, stamped now."""
    return {**event.to_dict(), "time": time.time()}


def step_event(step, reward=0.4):
    return _line(run_events.step_event(step, {
        "reward/mean": reward, "reward/pass_rate": reward - 0.05, "reward/syntax": 0.9, "kl": 0.001 * step,
        "loss/policy": -0.01, "clip_frac": 0.02, "entropy": 1.1, "tokens_per_s": 500.0,
        "time/rollout_s": 1.0, "time/sandbox_s": 0.3, "time/update_s": 0.5}))


def problem_event(step, problem_id="HumanEval/0", statuses=("passed", "failed")):
    cands = []
    for s in statuses:
        r = result(s, passed=2 if s == "passed" else (0 if s in ("timeout", "syntax_error") else 1),
                   ran=0 if s in ("timeout", "syntax_error") else 2, stderr="Traceback: boom" if s != "passed" else "")
        cands.append({"code": "def add0(a, b):\n    return a + b\n", "reward": 1.0 if s == "passed" else 0.3,
                      "rewards": {"pass_rate": 1.0 if s == "passed" else 0.5, "syntax": 1.0}, "result": r})
    rate = sum(s == "passed" for s in statuses) / len(statuses)
    return _line(run_events.problem_event(step, problem_id, rate, cands,
                                      zero_variance=run_events.zero_variance([c["reward"] for c in cands])))


def runtime_block(**changes):
    """A start event's runtime block as the trainer writes it for Qwen3.5 on a GPU without the fast kernels."""
    return {"torch": "2.11.0", "transformers": "5.17.0", "peft": "0.18.0", "accelerate": "1.12.0",
            "device": "cuda:0 (NVIDIA H200)", "dtype": "bfloat16", "architecture": "Qwen3_5ForCausalLM",
            "layer_types": {"linear_attention": 24, "full_attention": 8},
            "kernels": {"attention": "sdpa", "gated_delta_rule": "torch", "causal_conv1d": "torch"},
            "warnings": ["gated_delta_rule runs transformers' PyTorch fallback: slow; install flash-linear-attention"],
            **changes}


def start_event(**runtime_changes):
    return _line(run_events.start_event({}, "Qwen/Qwen3.5-9B", steps=2, runtime=runtime_block(**runtime_changes)))


def eval_event(step, p1, per_problem=None):
    if per_problem is not None:  # {problem_id: pass@1}, as the trainer's per_problem
        per_problem = {pid: {"n": 4, "c": round(4 * v), "pass@1": v} for pid, v in per_problem.items()}
    return _line(run_events.eval_event(step, "heldout", p1, {"2": min(1.0, p1 + 0.1)}, per_problem=per_problem))


def write_events(path: Path, events: list[dict], *, partial: str = "") -> None:
    with open(path, "a", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
        f.write(partial)


def full_run_events(run_dir: Path, steps: int = 2) -> list[dict]:
    """What a trainer writes for a short run, including a real adapter-shaped checkpoint dir."""
    ckpt = run_dir / "checkpoints" / f"step-{steps}"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (ckpt / "adapter_model.safetensors").write_bytes(b"\x00" * 4096)
    lines = [_line(run_events.Start(config={}, model="tiny", steps=steps)), eval_event(0, 0.25)]
    for s in range(1, steps + 1):
        lines += [step_event(s, 0.3 + 0.1 * s), problem_event(s), problem_event(s, "add-1", ("failed", "failed"))]
    lines += [eval_event(steps, 0.75),
              _line(run_events.checkpoint_event(steps, f"checkpoints/step-{steps}", "adapter")),
              _line(run_events.done_event("succeeded"))]
    return lines


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    """A models directory holding both tiny models, each built once per session (untrained: they fail
    nearly every problem, which is fine): ``tiny`` (dense Qwen3) and ``tiny-qwen3_5`` (hybrid Qwen3.5),
    the names the CPU demo presets use."""
    from training.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("models")
    build_tiny_model(root / "tiny")
    build_tiny_model(root / "tiny-qwen3_5", arch="qwen3_5")
    return root


@pytest.fixture(scope="session")
def tiny_model_dir(models_dir):
    """The tiny Qwen3 model (``models/tiny``)."""
    return models_dir / "tiny"


def demo_config(steps=2, model=None):
    """The CPU demo preset (models/tiny: point settings.MODELS_DIR at ``models_dir``), shrunk to a few
    seconds a step; ``model`` names another installed model (``models/tiny-qwen3_5``)."""
    from webapp.runs.presets import get_preset
    from webapp.runs.config import merge_config

    if model is not None:
        return merge_config(demo_config(steps), {"model": {"name_or_path": model}})
    return merge_config(get_preset("cpu-demo")["config"], {
        "sampling": {"problems_per_step": 2, "candidates_per_problem": 2, "max_new_tokens": 24},
        "train": {"steps": steps, "eval_every": 1, "eval_samples": 1, "checkpoint_every": 1},
    })
