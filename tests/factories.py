"""Factories for the tests: users, problem sets, runs, and the events a trainer writes.

Events are built with training's own constructors (training/events.py) and returned as the JSON lines
the trainer writes (dicts, stamped now), so that a test can still bend one before writing it.
``ingest`` stores them as the supervisor does: appended to the run's events.jsonl, followed from the
run's stored offset and ingested line by line.

Scenarios that tests of the web app and the browser tests share (flagged candidates, repair turns,
the difficulty map, what-if re-scoring) are here too, so that no test module imports another.
"""
from __future__ import annotations

import io
import json
import random
import threading
import time
from pathlib import Path

from training import events as run_events

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo" / "problems.jsonl"


# ---- users --------------------------------------------------------------------------------------------

def make_user(username: str, password: str | None = None, **fields):
    """A user whose password is ``<username>-password-1`` unless given."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username, password=password or f"{username}-password-1", **fields)


# ---- problem sets -------------------------------------------------------------------------------------

def jsonl(*objects) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objects).encode()


def problem_lines(n_train: int = 3, n_heldout: int = 1, *, slash: bool = True) -> bytes:
    """``add``-style function problems: ``HumanEval/0`` (with ``slash``) then ``add-1``, ``add-2``, ...,
    the last ``n_heldout`` of them held out."""
    lines = []
    for i in range(n_train + n_heldout):
        pid = f"HumanEval/{i}" if slash and i == 0 else f"add-{i}"
        lines.append({"id": pid, "kind": "function", "prompt": f"def add{i}(a, b):\n", "entry_point": f"add{i}",
                      "tests": [f"assert add{i}(1, 2) == 3", f"assert add{i}(2, 2) == 4"],
                      "reference_solution": f"def add{i}(a, b):\n    return a + b\n",
                      "split": "train" if i < n_train else "heldout"})
    return jsonl(*lines)


def make_problem_set(owner, name: str = "small set", data: bytes | None = None):
    """A problem set imported from ``data`` (JSON Lines; ``problem_lines()`` when None), validation not queued."""
    from webapp.problems.services import create_problem_set

    f = io.BytesIO(problem_lines() if data is None else data)
    f.name = "problems.jsonl"
    ps, errors = create_problem_set(owner, name, f, validate=False)
    assert ps is not None, errors
    return ps


def fail_validation(ps, problem_id: str):
    """Record a finished validation of ``ps`` in which only ``problem_id``'s reference failed; returns that row."""
    from webapp.problems.models import ProblemValidation

    for p in ps.problems.all():
        ok = p.problem_id != problem_id
        ProblemValidation.objects.create(problem=p, reference_passed=ok, empty_failed=True,
                                         detail="" if ok else "reference solution failed: AssertionError")
    ps.validation_status, ps.validation_passed, ps.validation_failed = "done", ps.problem_count - 1, 1
    ps.save()
    return ps.problems.get(problem_id=problem_id)


# ---- runs ---------------------------------------------------------------------------------------------

TINY_OVERRIDES = {"train": {"steps": 3}, "sampling": {"problems_per_step": 2, "candidates_per_problem": 2}}


def make_run(owner, name: str = "first run", problem_set=None, overrides: dict | None = None):
    """A queued run of ``problem_set`` (a new ``make_problem_set`` when None) with ``TINY_OVERRIDES``."""
    from webapp.runs.services import create_run

    return create_run(owner, name, problem_set or make_problem_set(owner),
                      TINY_OVERRIDES if overrides is None else overrides)


def form_data(problem_set, **changes):
    """The new-run form's POST data for the CPU demo preset with TINY_OVERRIDES; ``changes`` override fields."""
    from webapp.runs.forms import flatten
    from webapp.runs.presets import get_preset
    from webapp.runs.config import default_config, merge_config

    values = flatten(merge_config(default_config(), merge_config(get_preset("cpu-demo")["config"], TINY_OVERRIDES)))
    data = {"name": "form run", "problem_set": problem_set.pk}
    for k, v in values.items():
        if isinstance(v, bool):
            if v:
                data[k] = "on"
        elif v is None:
            data[k] = ""
        elif isinstance(v, list):
            data[k] = json.dumps(v)
        else:
            data[k] = v
    data.update(changes)
    return data


def install_model_stub(directory: Path) -> Path:
    """A directory that passes for an installed model (its config.json) where nothing loads it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}")
    return directory


# ---- events -------------------------------------------------------------------------------------------

def line(event: run_events.Event) -> dict:
    """An event (training/events.py) as the trainer's line holds it, stamped now."""
    return {**event.to_dict(), "time": time.time()}


def result(status="failed", passed=1, total=2, ran=None, stdout="", stderr=""):
    """A sandbox result (ExecutionResult's JSON) that passed ``passed`` of ``total`` tests."""
    ran = total if ran is None else ran
    tests = [{"name": f"test {i + 1}", "passed": i < passed, "error": None if i < passed else "AssertionError",
              "time_s": 0.001} for i in range(ran)]
    return {"status": status, "tests_passed": passed, "tests_total": total, "tests": tests, "syntax_ok": True,
            "format_ok": True, "wall_time_s": 0.05, "cpu_time_s": 0.04, "peak_memory_mb": 10.0, "stdout": stdout,
            "stderr": stderr, "stdout_truncated": False, "stderr_truncated": False, "exit_code": 0, "detail": "",
            "isolation": "process", "isolation_features": []}


def runtime_block(**changes):
    """A start event's runtime block as the trainer writes it for Qwen3.5 on a GPU without the fast kernels."""
    return {"torch": "2.11.0", "transformers": "5.17.0", "peft": "0.18.0", "accelerate": "1.12.0",
            "device": "cuda:0 (NVIDIA H200)", "dtype": "bfloat16", "architecture": "Qwen3_5ForCausalLM",
            "layer_types": {"linear_attention": 24, "full_attention": 8},
            "kernels": {"attention": "sdpa", "gated_delta_rule": "torch", "causal_conv1d": "torch"},
            "warnings": ["gated_delta_rule runs transformers' PyTorch fallback: slow; install flash-linear-attention"],
            **changes}


def start_event(**runtime_changes):
    return line(run_events.start_event({}, "Qwen/Qwen3.5-9B", steps=2, runtime=runtime_block(**runtime_changes)))


def step_event(step, reward=0.4):
    return line(run_events.step_event(step, {
        "reward/mean": reward, "reward/pass_rate": reward - 0.05, "reward/syntax": 0.9, "kl": 0.001 * step,
        "loss/policy": -0.01, "clip_frac": 0.02, "entropy": 1.1, "tokens_per_s": 500.0,
        "time/rollout_s": 1.0, "time/sandbox_s": 0.3, "time/update_s": 0.5}))


def problem_event(step, problem_id="HumanEval/0", statuses=("passed", "failed")):
    """One group of ``add0`` candidates, one per status (passed: reward 1.0, any other: 0.3)."""
    cands = []
    for s in statuses:
        r = result(s, passed=2 if s == "passed" else (0 if s in ("timeout", "syntax_error") else 1),
                   ran=0 if s in ("timeout", "syntax_error") else 2, stderr="Traceback: boom" if s != "passed" else "")
        cands.append({"code": "def add0(a, b):\n    return a + b\n", "reward": 1.0 if s == "passed" else 0.3,
                      "rewards": {"pass_rate": 1.0 if s == "passed" else 0.5, "syntax": 1.0}, "result": r})
    rate = sum(s == "passed" for s in statuses) / len(statuses)
    return line(run_events.problem_event(step, problem_id, rate, cands,
                                         zero_variance=run_events.zero_variance([c["reward"] for c in cands])))


def eval_event(step, p1, per_problem=None):
    """A held-out evaluation; ``per_problem``: {problem_id: pass@1}, as the trainer's per_problem."""
    if per_problem is not None:
        per_problem = {pid: {"n": 4, "c": round(4 * v), "pass@1": v} for pid, v in per_problem.items()}
    return line(run_events.eval_event(step, "heldout", p1, {"2": min(1.0, p1 + 0.1)}, per_problem=per_problem))


def write_events(path: Path, events: list[dict], *, partial: str = "") -> None:
    """Append ``events`` as JSON lines to ``path``, then ``partial`` (a line the trainer is still writing)."""
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
    lines = [line(run_events.Start(config={}, model="tiny", steps=steps)), eval_event(0, 0.25)]
    for s in range(1, steps + 1):
        lines += [step_event(s, 0.3 + 0.1 * s), problem_event(s), problem_event(s, "add-1", ("failed", "failed"))]
    lines += [eval_event(steps, 0.75),
              line(run_events.checkpoint_event(steps, f"checkpoints/step-{steps}", "adapter")),
              line(run_events.done_event("succeeded"))]
    return lines


def ingest(run, events=(), *, claim: bool = True, thread: bool = False) -> list[dict]:
    """Store ``events`` as the supervisor does: appended to the run's events.jsonl, then every line there
    that the run has not stored yet, followed from its stored offset and ingested (and broadcast).

    ``claim``: a queued run is claimed first, as a worker does before it follows the file.
    ``thread``: ingest on a thread of its own, for browser tests: Playwright's sync API keeps an event
    loop on the test's thread, where the channel layer's ``async_to_sync`` refuses to broadcast.
    Returns the events stored."""
    from django.db import connection

    from webapp.core.trainer_process import EventFollower
    from webapp.runs.supervisor import ingest_new_events

    if claim:
        run.claim(host="h", pid=1)  # a no-op unless the run is queued
    write_events(run.path / "events.jsonl", list(events))

    def work():
        run.refresh_from_db(fields=["events_offset", "events_seq"])
        follower = EventFollower(run.path / "events.jsonl", offset=run.events_offset, seq=run.events_seq)
        try:
            return ingest_new_events(run, follower)
        finally:
            follower.close()

    if not thread:
        return work()
    stored, failed = [], []

    def in_thread():
        try:
            stored.extend(work())
        except BaseException as exc:  # re-raised on the test's thread
            failed.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return stored


def finished_run(run, steps: int = 2):
    """``run`` with a short run's every event stored (``full_run_events``): succeeded, with a checkpoint."""
    ingest(run, full_run_events(run.path, steps=steps))
    run.refresh_from_db()
    return run


# ---- scenarios shared by the web app's tests and the browser tests -------------------------------------

# Reward integrity: (step, candidate index) -> flags of its result; HumanEval/0 has three candidates a step.
FLAGGED = {(1, 0): ["spoofed_output"], (1, 2): ["spoofed_output", "broad_except"], (2, 1): ["broad_except"]}
PENALIZE = ["spoofed_output"]


def flagged_events(step: int, flagged: dict[int, list[str]], penalize=PENALIZE) -> list[dict]:
    """A step (with its ``flags/*`` counts) and HumanEval/0's three candidates; ``flagged``: {index: flags}.
    A candidate with a flag in ``penalize`` is written as the trainer writes a penalized one."""
    from sandbox.flags import VOCABULARY

    step_ev = step_event(step)
    step_ev["metrics"] |= {f"flags/{name}": sum(name in f for f in flagged.values()) for name in VOCABULARY}
    step_ev["metrics"]["candidates"] = 3
    event = problem_event(step, statuses=("passed", "failed", "failed"))
    for index, cand in enumerate(event["candidates"]):
        cand["result"]["flags"] = flagged.get(index, [])
        penalized = [f for f in penalize if f in cand["result"]["flags"]]
        if penalized:
            cand |= {"penalized_flags": penalized, "reward": 0.0}
    return [step_ev, event]


def flagged_by_step(step: int) -> dict[int, list[str]]:
    """FLAGGED's candidates of ``step``: {index: flags}."""
    return {i: f for (s, i), f in FLAGGED.items() if s == step}


# Multi-turn repair: candidate 0 fails, is told why and passes; candidate 1 passes at once.
WRONG_ADD0 = "def add0(a, b):\n    return a - b\n"
RIGHT_ADD0 = "def add0(a, b):\n    return a + b\n"
FEEDBACK = ("Your program did not pass: wrong answer (1 of 2 tests passed).\n\nFailing tests:\n"
            "- test 2: `assert add0(2, 2) == 4` -> AssertionError")


def repair_event(step, problem_id="HumanEval/0"):
    """A problem event of a two-turn run: candidate 0 fails, is told why and passes; candidate 1 passes at once."""
    event = problem_event(step, problem_id, ("passed", "passed"))
    first = {"reply": f"```python\n{WRONG_ADD0}```", "code": WRONG_ADD0, "feedback": FEEDBACK,
             "result": result("failed"), "reward": 0.3, "rewards": {"pass_rate": 0.5}, "truncated": False, "flags": []}
    second = {"reply": f"```python\n{RIGHT_ADD0}```", "code": RIGHT_ADD0, "feedback": None,
              "result": result("passed", 2), "reward": 1.0, "rewards": {"pass_rate": 1.0}, "truncated": False,
              "flags": []}
    event["candidates"][0]["turns"] = [first, second]
    event["candidates"][0]["code"] = RIGHT_ADD0
    event["candidates"][1]["turns"] = [dict(second, feedback=None)]
    event["pass_rate_turn1"] = 0.5
    return event


def discounted_repair_run(user, problem_set):
    """A ``reward.turns: discounted`` run (gamma 0.5, Dr. GRPO, weights pass_rate/syntax 0.5/0.5) with one
    stored group: A fails (pass_rate 0, syntax 1: 0.5), is told why and passes (1.0); B passes half the
    tests at once (0.75). Its turns are stored without their overlong penalty, as runs were before it was:
    the re-scoring infers the one their stored totals imply (0 here)."""
    config = {**TINY_OVERRIDES, "sampling": {**TINY_OVERRIDES["sampling"], "prompt_style": "chat", "turns": 2},
              "reward": {"turns": "discounted", "turn_discount": 0.5, "clip": None,
                         "weights": {"pass_rate": 0.5, "syntax": 0.5, "efficiency": 0.0, "conciseness": 0.0,
                                     "format": 0.0}},
              "ppo": {"advantage": "dr_grpo"}}
    run = make_run(user, "repair", problem_set, config)
    event = repair_event(1)
    a, b = event["candidates"]
    a["turns"][0].update(rewards={"pass_rate": 0.0, "syntax": 1.0}, reward=0.5)
    a["turns"][1].update(rewards={"pass_rate": 1.0, "syntax": 1.0}, reward=1.0)
    b["turns"][0].update(rewards={"pass_rate": 0.5, "syntax": 1.0}, reward=0.75)
    for c in (a, b):
        c.update(rewards=c["turns"][-1]["rewards"], reward=c["turns"][-1]["reward"])
    ingest(run, [step_event(1), event])
    return run


# The difficulty map: (step, problem_id, candidate statuses, set aside). HumanEval/0 becomes solved at
# step 2, add-1 is never solved (and, as dynamic sampling does, set aside at steps 1 and 3), add-2 is
# solved the first time it is sampled (step 2) and not sampled again.
SAMPLED = [
    (1, "HumanEval/0", ("failed", "failed"), None), (1, "add-1", ("failed", "failed"), "zero_variance"),
    (2, "HumanEval/0", ("passed", "failed"), None), (2, "add-2", ("passed", "failed"), None),
    (3, "HumanEval/0", ("passed", "passed"), None), (3, "add-1", ("failed", "failed"), "zero_variance"),
]


def difficulty_events(steps=(1, 2, 3)):
    events = []
    for step in steps:
        events.append(step_event(step))
        for s, problem_id, statuses, aside in SAMPLED:
            if s == step:
                event = problem_event(step, problem_id, statuses)
                if aside:
                    event |= {"used": False, "set_aside": aside, "round": 1}
                events.append(event)
    return events


# What-if re-scoring: candidates with every reward dimension, weighted as the run's defaults weigh them.
DIMS = ("pass_rate", "syntax", "efficiency", "conciseness", "format")
DEFAULT_WEIGHTS = (0.6, 0.15, 0.1, 0.05, 0.1)


def scored_problem_event(step: int, problem_id: str, rng: random.Random, k: int = 4, flags=()) -> dict:
    """``k`` candidates with random rewards in every dimension (``flags`` on the first one's result)."""
    cands = []
    for i in range(k):
        rewards = {d: rng.choice([0.0, 1.0, round(rng.random(), 3)]) for d in DIMS}
        res = result("passed" if rewards["pass_rate"] == 1.0 else "failed")
        res["flags"] = list(flags) if i == 0 else []
        total = sum(w * rewards[d] for d, w in zip(DIMS, DEFAULT_WEIGHTS))
        cands.append({"code": f"def f():\n    return {i}\n", "reward": total, "rewards": rewards, "result": res})
    return {"event": "problem", "step": step, "problem_id": problem_id, "candidates": cands, "time": time.time()}


def trained(run, steps=12, flags=()):
    """``run`` with ``steps`` steps of two problems x 4 candidates stored, as the supervisor stores them."""
    rng = random.Random(run.pk)
    events = []
    for s in range(1, steps + 1):
        events += [step_event(s), scored_problem_event(s, "HumanEval/0", rng, flags=flags),
                   scored_problem_event(s, "add-1", rng)]
    ingest(run, events)
    return run
