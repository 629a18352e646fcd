"""Shared fixtures for training tests: the tiny models (dense Qwen3 and hybrid Qwen3.5, each built once
per session; every test that takes ``tiny_model_dir`` runs on both), small problem sets."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _few_threads():
    # the test machine is small and shared; more threads only add contention on tiny matrices
    torch.set_num_threads(2)


ARCHITECTURES = ("qwen3", "qwen3_5")
_BUILT: dict[str, Path] = {}


def _tiny_model(arch: str, tmp_path_factory) -> Path:
    """The tiny ``arch`` model (random init, no warm start: tests need a model, not a good one)."""
    from training.tiny_model import build_tiny_model

    if arch not in _BUILT:
        _BUILT[arch] = Path(build_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}") / "model", seed=0, arch=arch))
    return _BUILT[arch]


@pytest.fixture(scope="session", params=ARCHITECTURES)
def tiny_model_dir(request, tmp_path_factory) -> Path:
    """Each tiny architecture in turn: Qwen3 (dense) and Qwen3.5 (Gated DeltaNet + full attention)."""
    return _tiny_model(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def qwen3_model_dir(tmp_path_factory) -> Path:
    """The tiny dense Qwen3 alone, for tests of what does not depend on the architecture (tokenizer)."""
    return _tiny_model("qwen3", tmp_path_factory)


@pytest.fixture(scope="session")
def qwen3_5_model_dir(tmp_path_factory) -> Path:
    """The tiny hybrid Qwen3.5 alone, for tests of its own layers and caches."""
    return _tiny_model("qwen3_5", tmp_path_factory)


PROBLEMS = [
    {"id": "add", "kind": "function", "prompt": "def add(a, b):\n", "entry_point": "add",
     "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
     "reference_solution": "def add(a, b):\n    return a + b\n", "split": "train"},
    {"id": "sub", "kind": "function", "prompt": "def sub(a, b):\n", "entry_point": "sub",
     "tests": ["assert sub(3, 2) == 1", "assert sub(0, 4) == -4"],
     "reference_solution": "def sub(a, b):\n    return a - b\n", "split": "train"},
    {"id": "neg", "kind": "function", "prompt": "def neg(a):\n", "entry_point": "neg",
     "tests": ["assert neg(3) == -3"], "reference_solution": "def neg(a):\n    return -a\n", "split": "train"},
    {"id": "mul", "kind": "function", "prompt": "def mul(a, b):\n", "entry_point": "mul",
     "tests": ["assert mul(3, 2) == 6", "assert mul(0, 4) == 0"],
     "reference_solution": "def mul(a, b):\n    return a * b\n", "split": "heldout"},
]


@pytest.fixture
def problems_file(tmp_path) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return path


def tiny_run_config(model_dir: Path, problems: Path, **sections):
    """A 2-step run config on the tiny model, small enough for a test; ``sections`` override keys."""
    from training.config import config_from_dict

    data = {
        "model": {"name_or_path": str(model_dir)},
        "problems": str(problems),
        "sampling": {"problems_per_step": 2, "candidates_per_problem": 4, "max_new_tokens": 16},
        "ppo": {"learning_rate": 1e-3, "micro_batch_size": 8},
        "train": {"steps": 2, "eval_every": 0, "eval_samples": 2, "checkpoint_every": 0},
        "sandbox": {"workers": 2},
    }
    for section, values in sections.items():
        data.setdefault(section, {})
        if isinstance(values, dict):
            data[section].update(values)
        else:
            data[section] = values
    return config_from_dict(data)


@pytest.fixture(scope="session")
def runner():
    """One sandbox runner for the whole session (the real, isolated execution engine)."""
    from sandbox import Runner

    with Runner(workers=2) as r:
        yield r


@pytest.fixture
def train_problems_file(tmp_path) -> Path:
    """Only train-split problems: a run without held-out evaluation."""
    path = tmp_path / "train-problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS if p["split"] == "train"))
    return path


# ---- driving a Trainer in-process (test_trainer, test_policy, test_dynamic_sampling, test_turns) ----------

def make_trainer(cfg, out_dir, runner):
    """A Trainer on the CPU writing to ``out_dir``/events.jsonl, stopped by ``out_dir``/STOP."""
    from accelerate import Accelerator

    from training.events import EventWriter
    from training.trainer import StopSignal, Trainer

    out_dir.mkdir(parents=True, exist_ok=True)
    events = EventWriter(out_dir / "events.jsonl")
    return Trainer(cfg, out_dir, Accelerator(cpu=True), events, StopSignal(out_dir / "STOP"), runner=runner,
                   progress=False)


def lora_state(model):
    """A copy of ``model``'s LoRA weights."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def record_gradients(trainer):
    """Clone the LoRA gradients the optimizer is about to apply, at every optimizer step."""
    recorded = []
    optimizer = trainer.optimizer
    step = optimizer.step
    named = [(k, p) for k, p in trainer.policy.model.named_parameters() if p.requires_grad]

    def recording_step(*args, **kwargs):
        recorded.append({k: p.grad.detach().clone() for k, p in named if p.grad is not None})
        return step(*args, **kwargs)

    optimizer.step = recording_step
    return recorded


def watch_and(action, events_path: Path, after_steps: int):
    """A daemon thread that calls ``action`` once ``events_path`` holds ``after_steps`` step events."""
    from training.events import read_events

    def run():
        deadline = time.time() + 300
        while time.time() < deadline:
            if events_path.exists() and sum(e["event"] == "step" for e in read_events(events_path)) >= after_steps:
                action()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
