"""The exact response shapes of the API table in docs/design.md "Web (webapp/)", end to end through the
Django test client."""
import io
from urllib.parse import quote

import pytest
from django.test import Client


from tests.factories import finished_run, ingest, problem_event, problem_lines

RUN_KEYS = {"id", "name", "status", "error", "step", "steps", "latest", "evals", "created", "started", "finished"}


def test_an_upload_answers_201_with_count_and_one_based_line_errors(client_alice):
    f = io.BytesIO(problem_lines() + b'{"id": "x", "kind": "nope"}\nnot json\n')
    f.name = "p.jsonl"
    r = client_alice.post("/api/problem-sets", {"file": f, "name": "probe"})
    assert r.status_code == 201
    body = r.json()
    assert {"id", "name", "problems", "errors"} <= set(body) and body["problems"] == 4
    assert [(e["line"], e["field"]) for e in body["errors"]] == [(5, "kind"), (6, None)]
    assert all(set(e) == {"line", "field", "message"} for e in body["errors"])
    detail = client_alice.get(f"/api/problem-sets/{body['id']}").json()
    assert detail["splits"] == {"train": 3, "heldout": 1}
    assert {"status", "passed", "failed", "results"} <= set(detail["validation"])
    assert detail["validation"]["status"] in ("pending", "running", "done", "failed")


@pytest.mark.parametrize("body,field", [
    ({"problem_set": "PS"}, "name"),
    ({"name": "x", "problem_set": "abc"}, "problem_set"),
    ({"name": "x", "problem_set": "PS", "config": []}, "config"),
    ({"name": "x", "problem_set": "PS", "config": {"ppo": {"bogus": 1}}}, "ppo.bogus"),
    ({"name": "x", "problem_set": "PS", "config": {"sampling": {"stop": 3}}}, "sampling.stop"),
])
def test_a_bad_run_request_answers_400_naming_the_field(client_alice, problem_set, body, field):
    body = {k: (problem_set.pk if v == "PS" else v) for k, v in body.items()}
    r = client_alice.post("/api/runs", body, content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field and r.json()["detail"].startswith(field + ":")


def test_run_reads_have_the_documented_keys_and_integer_history_steps(client_alice, run):
    finished_run(run)
    detail = client_alice.get(f"/api/runs/{run.pk}").json()
    assert RUN_KEYS <= set(detail) and "metrics" in detail["latest"]
    assert all({"step", "split", "pass@1", "pass@k"} <= set(e) for e in detail["evals"])
    assert all(isinstance(k, str) for e in detail["evals"] for k in e["pass@k"])
    metrics = client_alice.get(f"/api/runs/{run.pk}/metrics").json()
    assert all({"step", "metrics"} <= set(m) for m in metrics)
    problems = client_alice.get(f"/api/runs/{run.pk}/problems").json()
    for p in problems:
        # the documented keys, extended by multi-turn runs' turn-1 solve rate (null for a one-turn run), and the
        # two under their names from before the rename
        assert set(p) == {"problem_id", "split", "solve_rate", "history", "zero_variance_groups", "solve_rate_turn1",
                          "pass_rate", "pass_rate_turn1"}
        assert p["solve_rate_turn1"] is None and p["pass_rate"] == p["solve_rate"]
        assert all(type(step) is int and isinstance(rate, float) for step, rate in p["history"])
    [ckpt] = client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()
    assert {"step", "kind", "size_bytes", "download_url"} <= set(ckpt)
    presets = client_alice.get("/api/presets").json()
    assert presets and all({"name", "title", "config"} <= set(p) for p in presets)


def test_candidates_list_tests_that_never_ran_as_failed(client_alice, run):
    ingest(run, [problem_event(1, "add-1", ("timeout", "passed"))])
    url = f"/api/runs/{run.pk}/problems/{quote('add-1', safe='')}/candidates?status=failed"
    [cand] = client_alice.get(url).json()
    assert {"step", "index", "code", "reward", "rewards", "result", "truncated", "overlong_penalty"} <= set(cand)
    assert cand["truncated"] is False and cand["overlong_penalty"] is None
    assert cand["result"]["status"] == "timeout" and cand["result"]["tests_total"] == 2
    assert [t["passed"] for t in cand["result"]["tests"]] == [False, False]


def test_cancelling_a_running_run_answers_cancelling(client_alice, run):
    run.claim(host="h", pid=1)
    assert client_alice.post(f"/api/runs/{run.pk}/cancel").json() == {"status": "cancelling"}


@pytest.mark.parametrize("method,path", [
    ("get", "/api/presets"), ("get", "/api/engines"), ("get", "/api/problem-sets"), ("post", "/api/problem-sets"),
    ("get", "/api/problem-sets/1"), ("get", "/api/runs"), ("post", "/api/runs"), ("get", "/api/runs/1"),
    ("get", "/api/runs/1/metrics"), ("get", "/api/runs/1/problems"),
    ("get", "/api/runs/1/problems/a/candidates"), ("post", "/api/runs/1/cancel"),
    ("post", "/api/runs/1/resume"), ("get", "/api/runs/1/checkpoints"),
])
def test_every_api_endpoint_answers_401_json_to_anonymous_callers(db, method, path):
    r = getattr(Client(), method)(path)
    assert r.status_code == 401 and r["Content-Type"].startswith("application/json") and "detail" in r.json()


def test_a_run_request_takes_reward_normalize_and_the_schema_lists_its_modes(client_alice, problem_set):
    from webapp.runs.models import Run

    schema = client_alice.get("/api/openapi.json").content.decode()
    assert "per_component" in schema
    body = {"name": "gdpo", "problem_set": problem_set.pk, "config": {"reward": {"normalize": "per_component"}}}
    r = client_alice.post("/api/runs", body, content_type="application/json")
    assert r.status_code == 201, r.content
    assert Run.objects.get(pk=r.json()["id"]).config["reward"]["normalize"] == "per_component"
    bad = dict(body, config={"reward": {"normalize": "zscore"}})
    r = client_alice.post("/api/runs", bad, content_type="application/json")
    assert r.status_code == 400 and "reward.normalize" in r.content.decode()
