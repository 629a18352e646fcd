"""Benchmark evaluations through a real Celery worker: the tiny demo models on a HumanEval subset, before and
after a real short run (the hybrid Qwen3.5), a base model alone (the dense Qwen3), and a cancel."""
from __future__ import annotations

import json

import pytest
from django.conf import settings

from training.evaluation import pass_at_k
from webapp.evals import services
from webapp.evals.models import Evaluation
from webapp.runs.models import Run
from webapp.runs.services import create_run

from tests.factories import DEMO, make_problem_set
from tests.webapp.conftest import wait_for
from tests.webapp.runs.conftest import demo_config


def finished(evaluation: Evaluation, timeout: float) -> Evaluation:
    wait_for(lambda: evaluation.refresh_from_db() or evaluation.status in Evaluation.FINISHED, timeout,
             f"evaluation {evaluation.pk} finished", interval=0.5)
    return evaluation


@pytest.mark.slow
def test_before_and_after_a_run_on_a_humaneval_subset_through_the_worker(celery_worker, user, client):
    problem_set = make_problem_set(user, "demo", DEMO.read_bytes())
    config = demo_config(steps=1, model="models/tiny-qwen3_5")
    run = create_run(user, "short", problem_set, config)
    wait_for(lambda: Run.objects.get(pk=run.pk).status in ("succeeded", "failed", "cancelled"), 600,
             "the run finished", interval=0.5)
    run.refresh_from_db()
    assert run.status == "succeeded", (run.status, run.error)

    before, after = services.request_before_after(run, user, suite="humaneval:3", samples=2, seed=1)
    for evaluation in (before, after):
        finished(evaluation, 300)
        assert evaluation.status == "done", (evaluation.status, evaluation.error)
        assert evaluation.done == evaluation.total == 3 and evaluation.ks == [1, 2]
        rows = list(evaluation.problems.all())
        assert [r.problem_id for r in rows] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
        assert all(r.n == 2 and len(r.candidates) == 2 for r in rows)
        # the aggregate is the mean of each problem's unbiased estimate
        assert evaluation.pass_at_1 == pytest.approx(sum(pass_at_k(2, r.c, 1) for r in rows) / 3)
        assert evaluation.pass_at_k["2"] == pytest.approx(sum(pass_at_k(2, r.c, 2) for r in rows) / 3)
        # every sample was executed against HumanEval's check() asserts
        assert all(c["result"]["tests_total"] > 0 for r in rows for c in r.candidates)
        assert str(settings.MODELS_DIR) not in json.dumps(evaluation.summary)
    assert before.model == "models/tiny-qwen3_5" and after.model == f"run:{run.pk}/step-1"
    adapter_child = json.loads((after.directory / "eval.jsonl").read_text().splitlines()[-1])["summary"]
    assert adapter_child["suite"] == "humaneval:3" and adapter_child["seed"] == 1
    # the child of "after" loaded the run's adapter on the base; the child of "before" the base alone
    after_report = json.loads((after.directory / "stdout.log").read_text())
    before_report = json.loads((before.directory / "stdout.log").read_text())
    assert after_report["adapter"].endswith("step-1") and before_report["adapter"] is None
    assert after_report["model"] == before_report["model"]

    # both on the comparison page, and on the checkpoint's model card
    client.force_login(user)
    page = client.get("/evals/?benchmark=humaneval:3").content.decode()
    assert f'data-id="{before.pk}"' in page and f'data-id="{after.pk}"' in page
    checkpoint = run.checkpoints.filter(step=1).first()
    from webapp.runs.archive import archive_extras

    card = archive_extras(run, checkpoint, run.path / checkpoint.path)["README.md"].decode()
    assert "| humaneval:3 | base model (before training) | 2 | 1 |" in card
    assert "| humaneval:3 | this checkpoint (step 1) | 2 | 1 |" in card


@pytest.mark.slow
def test_a_base_model_evaluation_and_a_cancel_through_the_worker(celery_worker, user):
    evaluation = services.request_evaluation(user, model="models/tiny", suite="humaneval:2", samples=2, ks=[1, 2])
    Evaluation.objects.filter(pk=evaluation.pk).update(config={**evaluation.config, "sampling": {
        **evaluation.config["sampling"], "max_new_tokens": 16}})
    finished(evaluation, 300)
    assert evaluation.status == "done", (evaluation.status, evaluation.error)
    assert evaluation.summary["model"] == "models/tiny" and evaluation.problems.count() == 2

    # the whole suite at many samples takes long enough to be stopped midway
    long = services.request_evaluation(user, model="models/tiny", suite="humaneval", samples=8)
    wait_for(lambda: long.refresh_from_db() or long.status == "running", 120, "the evaluation started", interval=0.2)
    services.cancel_evaluation(long)
    finished(long, 120)
    assert long.status == "cancelled" and long.trainer_pid is None
    assert long.done < long.total
