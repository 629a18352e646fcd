"""Held-out problems join the per-problem table from the eval events' per_problem results, their
samples stored as the evaluation's candidates."""
import re

from tests.factories import eval_event, ingest, problem_event, step_event


def test_held_out_problems_have_before_and_after_from_each_evaluation(client_alice, run):
    ingest(run, [eval_event(0, 0.25, {"add-3": 0.25}), step_event(1, 0.4), problem_event(1),
                  eval_event(2, 0.75, {"add-3": 0.75})])
    rows = {p["problem_id"]: p for p in client_alice.get(f"/api/runs/{run.pk}/problems").json()}
    assert rows["add-3"]["split"] == "heldout"
    assert rows["add-3"]["history"] == [[0, 0.25], [2, 0.75]] and rows["add-3"]["solve_rate"] == 0.75
    assert rows["HumanEval/0"]["split"] == "train"


def test_a_repeated_evaluation_replaces_its_point(client_alice, run):
    ingest(run, [eval_event(0, 0.25, {"add-3": 0.25}), eval_event(0, 0.5, {"add-3": 0.5})])
    rows = {p["problem_id"]: p for p in client_alice.get(f"/api/runs/{run.pk}/problems").json()}
    assert rows["add-3"]["history"] == [[0, 0.5]]


def test_a_held_out_problems_pane_gives_its_evaluations(client_alice, run):
    ingest(run, [eval_event(0, 0.25, {"add-3": 0.25}), eval_event(2, 0.75, {"add-3": 0.75})])
    html = client_alice.get(f"/runs/{run.pk}/problems/add-3/candidates").content.decode()
    assert "step 0: <strong>25%</strong> → step 2: <strong>75%</strong>" in html
    assert "No candidates" not in html


def _eval_with_samples(step, statuses, problem_id="add-3"):
    """An eval event whose per_problem entry lists its samples, as the trainer writes them."""
    samples = problem_event(step, problem_id, statuses)["candidates"]
    event = eval_event(step, 0.0, {problem_id: sum(s == "passed" for s in statuses) / len(statuses)})
    event["per_problem"][problem_id]["candidates"] = samples
    return event


def test_held_out_samples_are_stored_as_eval_candidates_apart_from_train_ones(client_alice, run):
    ingest(run, [_eval_with_samples(0, ("failed", "timeout")), step_event(1, 0.4), problem_event(1),
                  _eval_with_samples(2, ("passed", "failed", "passed"))])
    url = f"/api/runs/{run.pk}/problems/add-3/candidates"
    every = client_alice.get(url).json()
    assert [(c["phase"], c["step"], c["index"]) for c in every] == [("eval", 2, 0), ("eval", 2, 1), ("eval", 2, 2),
                                                                    ("eval", 0, 0), ("eval", 0, 1)]
    before = client_alice.get(url + "?phase=eval&step=0").json()
    assert [c["outcome"] for c in before] == ["wrong answer", "timeout"]
    timeout = before[1]
    assert timeout["result"]["stderr"] == "Traceback: boom" and timeout["code"].startswith("def add0")
    assert [t["passed"] for t in timeout["result"]["tests"]] == [False, False]  # never ran: listed as failed
    assert len(client_alice.get(url + "?phase=eval&step=2&status=passed").json()) == 2
    assert client_alice.get(url + "?phase=train").json() == []
    train = client_alice.get(f"/api/runs/{run.pk}/problems/HumanEval%2F0/candidates").json()
    assert {c["phase"] for c in train} == {"train"}
    assert client_alice.get(f"/api/runs/{run.pk}/problems/HumanEval%2F0/candidates?phase=eval").json() == []
    bad = client_alice.get(url + "?phase=heldout")
    assert bad.status_code == 400 and bad.json()["field"] == "phase"


def test_evaluation_samples_stay_out_of_what_counts_training_candidates(client_alice, run):
    from webapp.runs import queries, rescore

    ingest(run, [_eval_with_samples(0, ("timeout", "timeout")), step_event(1, 0.4), problem_event(1)])
    assert queries.sandbox_health(run)["timeouts"] == 0 and queries.sandbox_health(run)["total"] == 2
    assert rescore.stored_steps(run) == (1, 1)


def test_a_repeated_evaluation_replaces_its_samples(client_alice, run):
    ingest(run, [_eval_with_samples(0, ("failed", "failed")), _eval_with_samples(0, ("passed",))])
    samples = client_alice.get(f"/api/runs/{run.pk}/problems/add-3/candidates?phase=eval").json()
    assert [(c["step"], c["outcome"]) for c in samples] == [(0, "passed")]


def test_another_users_held_out_samples_are_not_found(client, other_user, run):
    ingest(run, [_eval_with_samples(0, ("failed",))])
    client.force_login(other_user)
    assert client.get(f"/api/runs/{run.pk}/problems/add-3/candidates?phase=eval").status_code == 404
    assert client.get(f"/runs/{run.pk}/problems/add-3/candidates?step=0").status_code == 404


def test_a_held_out_problems_pane_lists_the_samples_before_and_after_training(client_alice, run):
    ingest(run, [_eval_with_samples(0, ("failed", "timeout")), _eval_with_samples(3, ("passed", "passed"))])
    run.finish("succeeded")
    html = client_alice.get(f"/runs/{run.pk}/problems/add-3/candidates?step=0").content.decode()
    assert "step 0: <strong>0%</strong> → step 3: <strong>100%</strong>" in html
    assert 'data-eval-step="0" class="active">before training (step 0)</a>' in html
    assert 'data-eval-step="3" class="">after training (step 3)</a>' in html
    assert "2 samples of the evaluation at step 0" in html
    assert len(re.findall(r'class="candidate" data-step="0" data-index="\d" data-phase="eval"', html)) == 2
    assert "eval at step 0 · sample #1" in html and "Traceback: boom" in html
    every = client_alice.get(f"/runs/{run.pk}/problems/add-3/candidates").content.decode()
    assert "4 samples of every evaluation" in every and every.index('data-step="3"') < every.index('data-step="0"')
