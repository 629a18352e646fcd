import json
import math

import pytest

from training.events import EventWriter, read_events


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
        events.problem(3, "two-sum", 0.5, [{"code": "x", "reward": 0.4, "rewards": {}, "result": {}}])
        events.eval(0, "heldout", 0.31, {"4": 0.48})
        events.checkpoint(50, "checkpoints/step-50", "adapter")
        events.done("succeeded")
    problem, ev, ck, done = read_events(tmp_path / "e.jsonl")
    assert problem["problem_id"] == "two-sum" and problem["pass_rate"] == 0.5 and problem["step"] == 3
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
