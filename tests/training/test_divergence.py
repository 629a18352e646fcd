"""Divergence warnings (training/divergence.py): bounds on KL and loss, a flat reward at the floor, once each."""
import math

import pytest

from training.config import ConfigError, MonitorConfig, config_from_dict
from training.divergence import DivergenceMonitor
from training.events import EventError, parse_event, warning_event


def healthy(step: int) -> dict:
    """A learning run's step: KL creeping up, a small loss, reward and pass rate rising."""
    return {"kl": 0.001 * step, "loss/policy": -0.02, "loss/kl": 0.0001 * step, "reward/mean": 0.3 + 0.01 * step,
            "pass@1/train": 0.1 + 0.01 * step}


def run(monitor: DivergenceMonitor, steps: list[dict]) -> list:
    found = []
    for i, metrics in enumerate(steps, start=1):
        found += monitor.observe(i, metrics)
    return found


def test_a_healthy_run_gets_no_warning():
    assert run(DivergenceMonitor(MonitorConfig()), [healthy(s) for s in range(1, 61)]) == []


def test_kl_past_its_bound_warns_once_naming_the_value_the_bound_and_the_step():
    steps = [healthy(s) for s in range(1, 31)]
    for s in (8, 9, 20):
        steps[s - 1] = {**steps[s - 1], "kl": 90.0}
    found = run(DivergenceMonitor(MonitorConfig(kl_max=10.0)), steps)
    assert [(w.condition, w.step, w.value, w.bound) for w in found] == [("kl", 8, 90.0, 10.0)]
    assert "step 8" in found[0].message and "90 nats/token" in found[0].message and "kl_max 10" in found[0].message


def test_a_kl_at_the_bound_is_not_past_it_and_null_turns_the_bound_off():
    assert DivergenceMonitor(MonitorConfig(kl_max=1.0)).observe(1, {**healthy(1), "kl": 1.0}) == []
    assert DivergenceMonitor(MonitorConfig(kl_max=None)).observe(1, {**healthy(1), "kl": 1e9}) == []


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_a_kl_or_loss_that_is_not_a_number_warns(bad):
    found = DivergenceMonitor(MonitorConfig()).observe(3, {**healthy(3), "kl": bad, "loss/policy": bad})
    assert sorted(w.condition for w in found) == ["kl", "loss"]
    assert all(w.value is None and "not a finite number" in w.message for w in found)


def test_the_loss_bound_reads_the_total_loss():
    monitor = DivergenceMonitor(MonitorConfig(loss_max=5.0))
    assert monitor.observe(1, {**healthy(1), "loss/policy": -4.0, "loss/kl": -0.5}) == []
    (w,) = monitor.observe(2, {**healthy(2), "loss/policy": -6.0, "loss/kl": 0.5})
    assert (w.condition, w.step, w.value, w.bound, w.metric) == ("loss", 2, 5.5, 5.0, "loss/policy + loss/kl")


def floor(step: int, reward: float = 0.2) -> dict:
    """The repair run of issue 30: nothing passes, the reward sits at syntax + format."""
    return {**healthy(step), "reward/mean": reward, "pass@1/train": 0.0}


def test_a_reward_flat_at_the_floor_for_n_steps_warns_once_at_the_nth_step():
    found = run(DivergenceMonitor(MonitorConfig(flat_reward_steps=10)), [floor(s) for s in range(1, 31)])
    assert [(w.condition, w.step, w.since_step) for w in found] == [("flat_reward", 10, 1)]
    assert found[0].value == pytest.approx(0.2)
    assert "0.200" in found[0].message and "10 steps" in found[0].message and "steps 1–10" in found[0].message


def test_fewer_flat_steps_than_n_or_one_solved_step_between_does_not_warn():
    monitor = DivergenceMonitor(MonitorConfig(flat_reward_steps=5))
    steps = [floor(s) for s in range(1, 5)] + [{**floor(5), "pass@1/train": 0.01}] + [floor(s) for s in range(6, 10)]
    assert run(monitor, steps) == []
    (w,) = monitor.observe(10, floor(10))  # steps 6-10: five flat steps in a row
    assert (w.step, w.since_step) == (10, 6)


def test_a_moving_reward_with_no_solve_is_not_flat():
    steps = [floor(s, reward=0.1 + 0.02 * s) for s in range(1, 21)]  # learning syntax and format, no solve yet
    assert run(DivergenceMonitor(MonitorConfig(flat_reward_steps=5, flat_reward_tol=0.01)), steps) == []


def test_each_condition_warns_once_and_several_can_warn_at_one_step():
    monitor = DivergenceMonitor(MonitorConfig(kl_max=1.0, loss_max=1.0, flat_reward_steps=2))
    bad = lambda s: {**floor(s), "kl": 50.0, "loss/policy": 20.0}  # noqa: E731
    assert sorted(w.condition for w in monitor.observe(1, bad(1))) == ["kl", "loss"]
    assert [w.condition for w in monitor.observe(2, bad(2))] == ["flat_reward"]
    assert run(monitor, [bad(s) for s in range(3, 10)]) == []


def test_conditions_that_warned_before_a_resume_stay_quiet():
    monitor = DivergenceMonitor(MonitorConfig(kl_max=1.0), already=["kl"])
    assert monitor.observe(5, {**healthy(5), "kl": 50.0}) == []


def test_the_monitor_section_is_validated_naming_the_field():
    with pytest.raises(ConfigError, match=r"monitor\.kl_max: must be > 0"):
        config_from_dict({"monitor": {"kl_max": 0}})
    with pytest.raises(ConfigError, match=r"monitor\.flat_reward_steps: must be >= 2"):
        config_from_dict({"monitor": {"flat_reward_steps": 1}})
    with pytest.raises(ConfigError, match=r"monitor\.kl_mx"):
        config_from_dict({"monitor": {"kl_mx": 1.0}})
    assert config_from_dict({"monitor": {"flat_reward_steps": None}}).monitor.flat_reward_steps is None


def test_a_warning_event_round_trips_and_refuses_an_unknown_condition():
    event = warning_event("monitor.kl_max", "KL ...", 8, condition="kl", metric="kl", value=90.0, bound=10.0)
    line = {**event.to_dict(), "time": 1.0}
    assert line["event"] == "warning" and line["value"] == 90.0 and line["source"] == "monitor.kl_max"
    assert "since_step" not in line
    assert parse_event(line).to_dict() == line
    with pytest.raises(EventError, match="warning event: field condition is 'grad'; valid: kl, loss, flat_reward"):
        parse_event({**line, "condition": "grad"})
    with pytest.raises(ValueError, match="unknown warning condition"):
        warning_event("monitor.kl_max", "", 8, condition="grad")


# ---- a real run on the tiny models ---------------------------------------------------------------------


def test_a_run_past_an_absurdly_low_kl_bound_warns_once_and_still_succeeds_with_the_warning_in_done(
        tmp_path, tiny_model_dir, train_problems_file, runner):
    from tests.training.conftest import tiny_run_config
    from training.events import read_events
    from training.trainer import train

    # Step 1 updates from the reference itself (KL 0); from step 2 the policy has moved, by any amount > 1e-12.
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 3},
                          monitor={"kl_max": 1e-12, "loss_max": None, "flat_reward_steps": None})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    warnings = [e for e in events if e["event"] == "warning"]
    steps = {e["step"]: e["metrics"]["kl"] for e in events if e["event"] == "step"}
    first = min(s for s, kl in steps.items() if kl > 1e-12)
    assert len(warnings) == 1  # once, though every later step is past the bound too
    (w,) = warnings
    assert (w["source"], w["condition"], w["step"], w["metric"], w["bound"]) == ("monitor.kl_max", "kl", first, "kl",
                                                                                  1e-12)
    assert w["value"] == pytest.approx(steps[first]) and f"at step {first}" in w["message"]
    # written right after its step's events, before the next step
    kinds = [(e["event"], e.get("step")) for e in events]
    assert kinds.index(("warning", first)) > kinds.index(("step", first))
    assert kinds.index(("warning", first)) < kinds.index(("step", first + 1)) if first < 3 else True
    done = events[-1]
    assert done["event"] == "done" and done["status"] == "succeeded"
    assert done["warnings"] == [{"source": "monitor.kl_max", "condition": "kl", "step": first, "message": w["message"]}]

    # Resumed (from its last checkpoint), the run keeps its warning in its new done event and does not repeat it.
    assert train(cfg, tmp_path / "run", resume=True, runner=runner, progress=False) == "succeeded"
    again = read_events(tmp_path / "run" / "events.jsonl")[len(events):]
    assert again[0]["event"] == "start" and again[0]["resumed_from"] == 3
    assert not [e for e in again if e["event"] == "warning"] and again[-1]["warnings"] == done["warnings"]


def test_a_run_within_its_bounds_writes_no_warning(tmp_path, qwen3_model_dir, train_problems_file, runner):
    from tests.training.conftest import tiny_run_config
    from training.events import read_events
    from training.trainer import train

    cfg = tiny_run_config(qwen3_model_dir, train_problems_file, train={"steps": 2})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert not [e for e in events if e["event"] == "warning"] and "warnings" not in events[-1]


def test_the_cli_s_last_line_lists_the_run_s_warnings(tmp_path, monkeypatch, capsys):
    import json

    import yaml

    import training.trainer
    from training import cli
    from training.events import EventWriter, done_event, warning_summary

    summary = warning_summary(warning_event("monitor.kl_max", "KL at step 8 ...", 8, condition="kl", value=90.0))

    def fake_train(cfg, out, resume, stop_file, progress, phase_threads):
        with EventWriter(out / "events.jsonl") as events:
            events.write(warning_event("monitor.kl_max", "KL at step 8 ...", 8, condition="kl", value=90.0))
            events.write(done_event("succeeded", warnings=[summary]))
        return "succeeded"

    monkeypatch.setattr(training.trainer, "train", fake_train)
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"id": "sub", "kind": "function", "entry_point": "sub", "prompt": "def sub(a, b):\n",
                                    "tests": ["assert sub(3, 5) == -2"], "split": "train",
                                    "reference_solution": "def sub(a, b):\n    return a - b\n"}) + "\n")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"problems": str(problems), "model": {"name_or_path": str(tmp_path)}}))
    out = tmp_path / "run"
    assert cli.main(["run", "--config", str(config), "--out", str(out), "--no-progress", "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {
        "status": "succeeded", "out": str(out), "warnings": [summary]}
