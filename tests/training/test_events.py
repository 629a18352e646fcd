import json
import math

import pytest

from training.events import (EVENT_KINDS, Checkpoint, Done, Eval, EventError, EventWriter, Problem, Start, Step,
                             checkpoint_event, done_event, eval_event, parse_event, problem_event, read_events,
                             start_event, step_event, warning_event)
from training.metrics import ZERO_VARIANCE_ATOL


def test_every_event_is_a_flushed_json_line_with_a_time(tmp_path):
    path = tmp_path / "events.jsonl"
    events = EventWriter(path)
    events.start({"ppo": {}}, "tiny")
    events.step(1, {"reward/mean": 0.5})
    # readable by a follower before the writer closes
    lines = path.read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["start", "step"]
    assert all(isinstance(json.loads(x)["time"], float) for x in lines)
    events.close()


def test_event_fields_follow_the_contract(tmp_path):
    with EventWriter(tmp_path / "e.jsonl") as events:
        events.problem(3, "two-sum", 0.5, [{"code": "x", "reward": 0.4, "rewards": {}, "result": {}}],
                       zero_variance=False)
        events.eval(0, "heldout", 0.31, {"4": 0.48})
        events.checkpoint(50, "checkpoints/step-50", "adapter")
        events.done("succeeded")
    problem, ev, ck, done = read_events(tmp_path / "e.jsonl")
    assert problem["problem_id"] == "two-sum" and problem["solve_rate"] == 0.5 and problem["step"] == 3
    assert problem["pass_rate"] == 0.5  # the name before solve_rate, still written for its readers
    assert ev["pass@1"] == 0.31 and ev["pass@k"] == {"4": 0.48} and ev["split"] == "heldout"
    assert ck == {**ck, "step": 50, "path": "checkpoints/step-50", "kind": "adapter"}
    assert done["status"] == "succeeded" and done["error"] is None


def test_non_finite_numbers_become_null(tmp_path):
    with EventWriter(tmp_path / "e.jsonl") as events:
        events.step(1, {"kl": math.nan, "grad_norm": math.inf, "loss/policy": 0.1})
    (step,) = read_events(tmp_path / "e.jsonl")
    assert step["metrics"] == {"kl": None, "grad_norm": None, "loss/policy": 0.1}


def test_unknown_kinds_and_statuses_are_rejected(tmp_path):
    with EventWriter(tmp_path / "e.jsonl") as events:
        with pytest.raises(ValueError, match="valid events: start, step"):
            events.emit("progress")
        with pytest.raises(ValueError, match="valid: succeeded, failed, cancelled"):
            events.done("ok")
        with pytest.raises(ValueError, match="valid: adapter, merged, full"):
            events.checkpoint(1, "x", "lora")


def test_a_torn_last_line_is_skipped_when_reading(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"event": "start", "time": 1}\n{"event": "st')
    assert read_events(path) == [{"event": "start", "time": 1}]


def test_the_writer_appends_to_an_existing_file(tmp_path):
    path = tmp_path / "e.jsonl"
    with EventWriter(path) as events:
        events.done("cancelled")
    with EventWriter(path) as events:
        events.start({}, "tiny", resumed_from=1)
    assert [e["event"] for e in read_events(path)] == ["done", "start"]


# ---- the typed definitions ---------------------------------------------------------------------------

def _written(tmp_path, *events):
    with EventWriter(tmp_path / "e.jsonl") as writer:
        for event in events:
            writer.write(event)
    return read_events(tmp_path / "e.jsonl")


def test_every_kind_the_trainer_writes_parses_back_to_the_event_it_was(tmp_path):
    made = [start_event({"ppo": {}}, "tiny", steps=3, runtime={"device": "cpu"}, resumed_from=2,
                        dropped={"unsolved": 1, "solved": 0}),
            step_event(3, {"reward/mean": 0.5, "flags/broad_except": 0, "reward/turn2": 0.1}),
            problem_event(3, "two-sum", 0.5, [{"code": "x", "reward": 0.4, "result": {"status": "failed"}}],
                          zero_variance=True, solve_rate_turn1=0.25, used=False, set_aside="zero_variance", round=2),
            eval_event(3, "heldout", 0.31, {"4": 0.48}, pass_at_1_turn1=0.2, per_problem={"a": {"n": 4, "c": 1}}),
            checkpoint_event(3, "checkpoints/step-3", "adapter"),
            done_event("succeeded", warnings=[{"source": "monitor.kl_max", "condition": "kl", "step": 2,
                                               "message": "KL ..."}]),
            warning_event("monitor.flat_reward_steps", "reward flat", step=3, condition="flat_reward",
                          metric="reward/mean", value=0.2, bound=10.0, since_step=1)]
    lines = _written(tmp_path, *made)
    assert [line["event"] for line in lines] == list(EVENT_KINDS)
    for line, event in zip(lines, made):
        parsed = parse_event(line)
        assert type(parsed) is type(event) and parsed.time == line["time"]
        assert parsed == type(event)(**{**event.__dict__, "time": line["time"]})
        assert parsed.to_dict() == line  # and back to the same line


def test_the_wire_names_stay_those_of_the_contract(tmp_path):
    ev, done = _written(tmp_path, eval_event(0, "heldout", 0.31, {"4": 0.48}, pass_at_1_turn1=0.2), done_event("failed"))
    assert ev["pass@1"] == 0.31 and ev["pass@k"] == {"4": 0.48} and ev["pass@1/turn1"] == 0.2
    assert "per_problem" not in ev  # an optional field left None is not written
    assert done["error"] is None and "error" in done  # done always says whether there was an error


def test_the_step_constructor_refuses_a_metric_the_registry_does_not_define():
    with pytest.raises(ValueError, match="not in the registry: made/up.*training/metrics.py"):
        step_event(1, {"reward/mean": 0.5, "made/up": 1.0})


def test_an_old_problem_event_reads_pass_rate_as_solve_rate():
    old = {"event": "problem", "step": 2, "problem_id": "a", "pass_rate": 0.25, "pass_rate_turn1": 0.0,
           "zero_variance": False, "candidates": [], "time": 1.0}
    event = parse_event(old)
    assert isinstance(event, Problem) and event.solve_rate == 0.25 and event.solve_rate_turn1 == 0.0
    assert event.extra == {}
    assert event.to_dict()["solve_rate"] == 0.25 and event.to_dict()["pass_rate"] == 0.25


def test_what_an_old_problem_event_left_out_is_derived_with_the_trainers_tolerance():
    candidates = [{"reward": 0.5, "result": {"status": "passed"}},
                  {"reward": 0.5 + ZERO_VARIANCE_ATOL / 2, "result": {"status": "failed"}}]
    event = parse_event({"event": "problem", "step": 1, "problem_id": "a", "candidates": candidates})
    assert event.solve_rate == 0.5 and event.zero_variance is True
    candidates[1]["reward"] = 0.5 + 2 * ZERO_VARIANCE_ATOL
    assert parse_event({"event": "problem", "step": 1, "problem_id": "a", "candidates": candidates}).zero_variance is False


def test_unknown_keys_are_kept_and_written_back():
    line = {"event": "start", "config": {}, "model": "scripted", "resumed": True, "time": 2.0}
    event = parse_event(line)
    assert isinstance(event, Start) and event.extra == {"resumed": True} and event.to_dict() == line


@pytest.mark.parametrize("line,message", [
    ({"event": "progress"}, "unknown event 'progress'; valid events: start, step"),
    ({"event": "step", "metrics": {}}, "step event: field step is missing"),
    ({"event": "step", "step": True, "metrics": {}}, "step event: field step must be an integer"),
    ({"event": "step", "step": 1, "metrics": {"kl": "high"}}, "field metrics: kl must be a number or null"),
    ({"event": "problem", "step": 1, "problem_id": 7, "solve_rate": 1.0}, "field problem_id must be a string"),
    ({"event": "problem", "step": 1, "problem_id": "a"}, "solve_rate is missing"),
    ({"event": "checkpoint", "step": 1, "path": "x", "kind": "lora"}, "valid: adapter, merged, full"),
    ({"event": "done", "status": "ok"}, "done event: field status is 'ok'; valid: succeeded"),
    ({"event": "done"}, "done event: field status is missing"),
])
def test_a_malformed_event_is_refused_naming_the_field(line, message):
    with pytest.raises(EventError, match=message.replace("(", r"\(")):
        parse_event(line)


def test_null_metrics_from_non_finite_numbers_parse():
    assert parse_event({"event": "step", "step": 1, "metrics": {"kl": None}}).metrics == {"kl": None}


def test_events_written_before_the_definitions_still_parse():
    """Lines as trainers of earlier versions and the web app's stored copies hold them."""
    lines = [{"event": "start", "config": {}, "model": "tiny", "time": 1.0},  # no steps, no runtime
             {"event": "step", "step": 1, "metrics": {"reward/std": 0.1}, "time": 1.0},  # a key no longer written
             {"event": "problem", "step": 1, "problem_id": "a", "pass_rate": 1, "zero_variance": True,
              "candidates": [{"index": 0, "reward": 1.0, "result": {"status": "passed"}}], "summarized": True},
             {"event": "eval", "step": 0, "split": "heldout", "pass@1": 0, "pass@k": {}},
             {"event": "checkpoint", "step": 1, "path": "checkpoints/step-1", "kind": "adapter"},
             {"event": "done", "status": "cancelled", "error": None}]
    kinds = [type(parse_event(line)) for line in lines]
    assert kinds == [Start, Step, Problem, Eval, Checkpoint, Done]
    assert parse_event(lines[2]).summarized is True and parse_event(lines[3]).pass_at_1 == 0.0


def test_the_writer_hands_each_event_and_its_line_to_its_observers(tmp_path):
    seen = []
    with EventWriter(tmp_path / "e.jsonl") as writer:
        writer.observers.append(lambda event, line: seen.append((type(event).__name__, line["event"])))
        writer.write(step_event(1, {"reward/mean": 0.5}))
        writer.write(warning_event("tracking.mlflow", "MLflow logging failed"))
    assert seen == [("Step", "step"), ("RunWarning", "warning")]
