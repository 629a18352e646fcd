"""Held-out problems join the per-problem table from the eval events' per_problem results."""
from webapp.runs.supervisor import EventFollower, ingest_new_events

from .conftest import eval_event, problem_event, step_event, write_events


def _ingest(run, events):
    run.claim(host="h", pid=1)
    write_events(run.path / "events.jsonl", events)
    follower = EventFollower(run.path / "events.jsonl")
    ingest_new_events(run, follower)
    follower.close()


def test_held_out_problems_have_before_and_after_from_each_evaluation(client_alice, run):
    _ingest(run, [eval_event(0, 0.25, {"add-3": 0.25}), step_event(1, 0.4), problem_event(1),
                  eval_event(2, 0.75, {"add-3": 0.75})])
    rows = {p["problem_id"]: p for p in client_alice.get(f"/api/runs/{run.pk}/problems").json()}
    assert rows["add-3"]["split"] == "heldout"
    assert rows["add-3"]["history"] == [[0, 0.25], [2, 0.75]] and rows["add-3"]["pass_rate"] == 0.75
    assert rows["HumanEval/0"]["split"] == "train"


def test_a_repeated_evaluation_replaces_its_point(client_alice, run):
    _ingest(run, [eval_event(0, 0.25, {"add-3": 0.25}), eval_event(0, 0.5, {"add-3": 0.5})])
    rows = {p["problem_id"]: p for p in client_alice.get(f"/api/runs/{run.pk}/problems").json()}
    assert rows["add-3"]["history"] == [[0, 0.5]]


def test_a_held_out_problems_pane_gives_its_evaluations(client_alice, run):
    _ingest(run, [eval_event(0, 0.25, {"add-3": 0.25}), eval_event(2, 0.75, {"add-3": 0.75})])
    html = client_alice.get(f"/runs/{run.pk}/problems/add-3/candidates").content.decode()
    assert "step 0: <strong>25%</strong> → step 2: <strong>75%</strong>" in html
    assert "No candidates" not in html
