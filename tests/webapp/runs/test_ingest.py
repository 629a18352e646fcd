"""Following events.jsonl and storing each event: real event lines, the real follower and ingest."""
import json

from webapp.runs import queries
from webapp.runs.models import Candidate, Checkpoint, Eval, ProblemStat, RunEvent, StepMetric
from webapp.runs.supervisor import EventFollower, ingest_new_events

from tests.factories import full_run_events, ingest, problem_event, step_event, write_events


def test_a_whole_run_lands_in_the_tables(run):
    assert run.claim(host="h", pid=1)
    write_events(run.path / "events.jsonl", full_run_events(run.path, steps=2))
    ingest(run, claim=False)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.step == 2
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    stat = ProblemStat.objects.get(run=run, problem_id="HumanEval/0")
    assert stat.history == [[1, 0.5], [2, 0.5]] and stat.split == "train"
    assert ProblemStat.objects.get(run=run, problem_id="add-1").zero_variance_groups == 2
    assert Candidate.objects.filter(run=run).count() == 8
    assert [(e.step, e.pass_at_1) for e in Eval.objects.filter(run=run)] == [(0, 0.25), (2, 0.75)]
    ckpt = Checkpoint.objects.get(run=run)
    assert (ckpt.kind, ckpt.step, ckpt.size_bytes) == ("adapter", 2, 4096 + len(json.dumps({"r": 8})))
    assert queries.headline(queries.evals(run)) == {"split": "heldout", "before": 25, "after": 75, "delta": 50,
                                                     "before_step": 0, "after_step": 2}


def test_a_partial_last_line_waits_for_its_newline(run):
    path = run.path / "events.jsonl"
    line = json.dumps(step_event(1))
    write_events(path, [], partial=line[:20])
    follower = EventFollower(path)
    assert follower.read() == []
    with open(path, "a") as f:
        f.write(line[20:] + "\n")
    [(seq, event, offset)] = follower.read()
    assert (seq, event["step"], offset) == (0, 1, len(line) + 1)


def test_rereading_the_file_never_duplicates_events(run):
    write_events(run.path / "events.jsonl", [step_event(1), problem_event(1)])
    ingest(run, claim=False)
    # A new follower that starts over from byte 0 (e.g. a supervisor restarted without its offset).
    follower = EventFollower(run.path / "events.jsonl")
    ingest_new_events(run, follower)
    follower.close()
    assert RunEvent.objects.filter(run=run).count() == 2
    assert Candidate.objects.filter(run=run).count() == 2


def test_the_follower_continues_from_the_stored_offset(run):
    write_events(run.path / "events.jsonl", [step_event(1)])
    ingest(run, claim=False)
    run.refresh_from_db()
    write_events(run.path / "events.jsonl", [step_event(2)])
    new = ingest(run, claim=False)
    assert [e["step"] for e in new] == [2]
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [0, 1]


def test_a_resumed_run_repeating_a_step_replaces_that_steps_records(run):
    write_events(run.path / "events.jsonl", [step_event(1, 0.1), problem_event(1, statuses=("failed", "failed"))])
    ingest(run, claim=False)
    write_events(run.path / "events.jsonl", [step_event(1, 0.9), problem_event(1, statuses=("passed", "passed"))])
    ingest(run, claim=False)
    assert StepMetric.objects.get(run=run, step=1).metrics["reward/mean"] == 0.9
    assert sorted(Candidate.objects.filter(run=run).values_list("status", flat=True)) == ["passed", "passed"]
    assert ProblemStat.objects.get(run=run, problem_id="HumanEval/0").history == [[1, 1.0]]


def test_a_corrupt_line_is_recorded_and_numbering_stays_exact(run):
    path = run.path / "events.jsonl"
    write_events(path, [step_event(1)])
    with open(path, "a") as f:
        f.write("{not json\n")
    write_events(path, [step_event(2)])
    ingest(run, claim=False)
    rows = list(RunEvent.objects.filter(run=run).values_list("seq", "kind"))
    assert rows == [(0, "step"), (1, "invalid"), (2, "step")]


def test_candidates_list_tests_that_never_ran_as_failed_and_label_the_outcome(run):
    write_events(run.path / "events.jsonl", [problem_event(1, statuses=("timeout", "passed"))])
    ingest(run, claim=False)
    failed = queries.candidates(run, "HumanEval/0", status="failed")
    assert len(failed) == 1 and failed[0]["outcome"] == "timeout"
    assert [t["passed"] for t in failed[0]["result"]["tests"]] == [False, False]
    assert "not run" in failed[0]["result"]["tests"][0]["error"]
    assert len(queries.candidates(run, "HumanEval/0", status="passed", step=1)) == 1
    assert queries.candidates(run, "HumanEval/0", step=2) == []
    health = queries.sandbox_health(run)
    assert health["timeouts"] == 1 and health["passed"] == 1 and health["infrastructure"] == 0


def test_nul_characters_in_model_output_are_stored_as_replacement_characters(run):
    # An untrained model samples NUL characters; PostgreSQL's jsonb and text refuse them.
    assert run.claim(host="h", pid=1)
    event = problem_event(1, problem_id="nul\x00id")
    event["candidates"][0]["code"] = "def f():\n    return '\x00'\n"
    event["candidates"][0]["result"]["stdout"] = "a\x00b"
    write_events(run.path / "events.jsonl", [step_event(1), event])
    ingest(run, claim=False)
    candidate = Candidate.objects.get(run=run, index=0)
    assert candidate.code == "def f():\n    return '\ufffd'\n"
    assert candidate.result["stdout"] == "a\ufffdb" and candidate.problem_id == "nul\ufffdid"
    assert RunEvent.objects.filter(run=run, kind="problem").count() == 1


def test_a_redis_outage_is_logged_once_and_its_end_once_while_events_are_stored(run, monkeypatch, caplog):
    import socket

    from channels_redis.core import RedisChannelLayer

    from webapp.runs import services
    from webapp.runs.models import RunEvent

    with socket.socket() as s:  # a port where no Redis answers: every broadcast fails to connect
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    monkeypatch.setattr(services, "get_channel_layer", lambda: RedisChannelLayer(hosts=[("127.0.0.1", dead)]))
    monkeypatch.setattr(services.channel_layer_outage, "failures", 0)
    caplog.set_level("INFO", logger="crucible.runs")
    for seq in range(20):
        services.ingest_event(run, step_event(seq + 1), seq=seq)
    assert RunEvent.objects.filter(run=run).count() == 20
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info and "unavailable" in failures[0].getMessage()

    class Layer:  # Redis is back
        async def group_send(self, group, message):
            pass

    monkeypatch.setattr(services, "get_channel_layer", Layer)
    caplog.clear()
    services.ingest_event(run, step_event(21), seq=20)
    services.ingest_event(run, step_event(22), seq=21)
    assert [r.getMessage() for r in caplog.records if r.name == "crucible.runs"] == [
        "the channel layer (Redis) is back after 20 failed call(s)"]


def test_candidates_keep_whether_they_were_truncated_and_their_overlong_penalty(run):
    event = problem_event(1, statuses=("failed", "passed"))
    event["candidates"][0].update(truncated=True, overlong_penalty=-0.25)
    event["candidates"][1]["truncated"] = False
    write_events(run.path / "events.jsonl", [event])
    ingest(run, claim=False)
    failed, passed = queries.candidates(run, "HumanEval/0", status="failed"), queries.candidates(run, "HumanEval/0",
                                                                                                 status="passed")
    assert (failed[0]["truncated"], failed[0]["overlong_penalty"]) == (True, -0.25)
    assert (passed[0]["truncated"], passed[0]["overlong_penalty"]) == (False, None)


def test_a_start_event_names_the_model_problems_and_probe_as_the_user_does_not_by_server_path(run, settings):
    from webapp.runs.services import ingest_event

    data = str(settings.RUNS_DIR.parent)
    config = {**run.config, "model": {**run.config["model"], "name_or_path": f"{data}/models/tiny",
                                       "adapters": [f"{data}/runs/7/checkpoints/step-2"]},
              "problems": f"{run.path}/problems.jsonl",
              "difficulty": {"probe": f"{run.path}/probe.jsonl", "drop_unsolved": True, "drop_solved": False}}
    sent = []
    import webapp.runs.services as services

    original = services.broadcast_event
    services.broadcast_event = lambda run_id, message: sent.append(message)
    try:
        assert ingest_event(run, {"event": "start", "config": config, "model": f"{data}/models/tiny",
                                  "runtime": {"device": "cpu"}}, seq=0)
    finally:
        services.broadcast_event = original
    stored = RunEvent.objects.get(run=run, seq=0).payload
    for payload in (stored, sent[0]):
        assert data not in json.dumps(payload), payload
        assert payload["model"] == run.config["model"]["name_or_path"] == payload["config"]["model"]["name_or_path"]
        assert payload["config"]["problems"] == f"problem set {run.problem_set_id}"
        assert payload["config"]["difficulty"] == {"probe": None, "drop_unsolved": True, "drop_solved": False}
        assert payload["runtime"] == {"device": "cpu"} and payload["config"]["ppo"] == run.config["ppo"]


def _old_problem_line(step, problem_id, rewards, statuses):
    """A problem event as trainers wrote it before solve_rate (and before zero_variance was written)."""
    return {"event": "problem", "step": step, "problem_id": problem_id,
            "pass_rate": sum(s == "passed" for s in statuses) / len(statuses), "time": 1.0,
            "candidates": [{"code": "x", "reward": r, "rewards": {}, "result": {"status": s}}
                           for r, s in zip(rewards, statuses)]}


def test_an_old_problem_event_reads_pass_rate_as_solve_rate_and_gets_trainings_zero_variance(run):
    from training.metrics import ZERO_VARIANCE_ATOL

    write_events(run.path / "events.jsonl", [
        _old_problem_line(1, "flat", [0.5, 0.5 + ZERO_VARIANCE_ATOL / 2], ("passed", "failed")),
        _old_problem_line(1, "varied", [0.5, 0.5 + 2 * ZERO_VARIANCE_ATOL], ("failed", "failed"))])
    ingest(run, claim=False)
    flat, varied = (ProblemStat.objects.get(run=run, problem_id=p) for p in ("flat", "varied"))
    assert flat.history == [[1, 0.5]] and flat.zero_variance_steps == [1]  # within training's tolerance
    assert varied.history == [[1, 0.0]] and varied.zero_variance_steps == []
    stored = RunEvent.objects.get(run=run, seq=0).payload
    assert stored["solve_rate"] == 0.5 and stored["pass_rate"] == 0.5 and stored["zero_variance"] is True


def test_an_event_that_breaks_its_definition_is_stored_as_written_and_changes_nothing(run):
    write_events(run.path / "events.jsonl", [{"event": "step", "step": "one", "metrics": {}}, step_event(2)])
    ingest(run, claim=False)
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "kind")) == [(0, "step"), (1, "step")]
    assert RunEvent.objects.get(run=run, seq=0).payload["step"] == "one"
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [2]
