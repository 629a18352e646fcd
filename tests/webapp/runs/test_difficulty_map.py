"""The difficulty map (GET /api/runs/{id}/difficulty-map) and set-aside groups, from ingested events."""
from urllib.parse import quote

from webapp.runs.models import Candidate, ProblemStat

from tests.factories import difficulty_events, ingest, problem_event


def test_the_map_lists_each_train_problems_pass_rate_per_step_and_its_status(client_alice, run):
    run.claim(host="h", pid=1)
    ingest(run, difficulty_events())
    body = client_alice.get(f"/api/runs/{run.pk}/difficulty-map").json()
    assert body["steps"] == [1, 2, 3]
    by_id = {p["problem_id"]: p for p in body["problems"]}
    assert list(by_id) == ["HumanEval/0", "add-1", "add-2"]
    assert by_id["HumanEval/0"] == {
        "problem_id": "HumanEval/0", "history": [[1, 0.0], [2, 0.5], [3, 1.0]], "zero_variance_steps": [1, 3],
        "set_aside_steps": [], "final_solve_rate": 1.0, "final_pass_rate": 1.0, "first_solved_step": 2, "zero_variance_groups": 2,
        "status": "became_solved"}
    assert by_id["add-1"]["status"] == "never_solved" and by_id["add-1"]["first_solved_step"] is None
    assert by_id["add-1"]["set_aside_steps"] == [1, 3] and by_id["add-1"]["history"] == [[1, 0.0], [3, 0.0]]
    assert by_id["add-2"]["status"] == "solved_from_start" and by_id["add-2"]["first_solved_step"] == 2
    assert body["summary"] == {"problems": 3, "became_solved": 1, "never_solved": 1, "solved_from_start": 1}


def test_held_out_problems_stay_off_the_map_and_an_empty_run_has_an_empty_map(client_alice, run):
    assert client_alice.get(f"/api/runs/{run.pk}/difficulty-map").json() == {
        "steps": [], "problems": [],
        "summary": {"problems": 0, "became_solved": 0, "never_solved": 0, "solved_from_start": 0}}
    ProblemStat.objects.create(run=run, problem_id="add-3", split="heldout", history=[[0, 0.0], [3, 0.5]])
    assert client_alice.get(f"/api/runs/{run.pk}/difficulty-map").json()["problems"] == []


def test_another_users_map_is_not_found(client, other_user, run):
    run.claim(host="h", pid=1)
    ingest(run, difficulty_events())
    client.force_login(other_user)
    assert client.get(f"/api/runs/{run.pk}/difficulty-map").status_code == 404
    client.logout()
    assert client.get(f"/api/runs/{run.pk}/difficulty-map").status_code == 401


def test_set_aside_candidates_are_stored_and_listed_as_not_used(client_alice, run):
    run.claim(host="h", pid=1)
    ingest(run, difficulty_events())
    assert set(Candidate.objects.filter(run=run).exclude(set_aside="").values_list("problem_id", "step")) == {
        ("add-1", 1), ("add-1", 3)}
    listed = client_alice.get(f"/api/runs/{run.pk}/problems/add-1/candidates?step=3").json()
    assert [(c["step"], c["used"], c["set_aside"]) for c in listed] == [(3, False, "zero_variance")] * 2
    used = client_alice.get(f"/api/runs/{run.pk}/problems/{quote('HumanEval/0', safe='')}/candidates").json()
    assert {(c["used"], c["set_aside"]) for c in used} == {(True, None)}
    # A resumed run repeats a step: the newer record, here used after all, replaces the older.
    ingest(run, [problem_event(3, "add-1", ("passed", "failed"))])
    assert ProblemStat.objects.get(run=run, problem_id="add-1").set_aside_steps == [1]
    html = client_alice.get(f"/runs/{run.pk}/problems/add-1/candidates?step=1").content.decode()
    assert "not in the update" in html and "zero variance" in html


def test_the_schema_documents_the_endpoint(client_alice):
    paths = client_alice.get("/api/openapi.json").json()["paths"]
    assert "/api/runs/{run_id}/difficulty-map" in paths
