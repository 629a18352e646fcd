"""Evaluations: stub model dirs and the evaluations' own dir under tmp, and rows as a finished job leaves them."""
from __future__ import annotations

import pytest
from django.utils import timezone

from tests.factories import install_model_stub


@pytest.fixture
def eval_dirs(settings, tmp_path):
    settings.MODELS_DIR = tmp_path / "models"
    settings.RUNS_DIR = tmp_path / "runs"
    settings.PROBLEM_SETS_DIR = tmp_path / "problem-sets"
    settings.EVALS_DIR = tmp_path / "evals"
    install_model_stub(settings.MODELS_DIR / "tiny")
    return tmp_path


def done_evaluation(owner, *, model="models/tiny", suite="humaneval:3", rows=None, samples=4, run=None, step=None,
                    label="", ks=(1, 2, 4)):
    """A finished evaluation whose problems passed ``rows`` ({problem_id: c}) of ``samples``, as the job
    stores it (pass@k by training's estimator)."""
    from training.evaluation import pass_at_k
    from webapp.evals.models import EvalProblem, Evaluation

    rows = rows if rows is not None else {"HumanEval/0": 4, "HumanEval/1": 1, "HumanEval/2": 0}
    others = [k for k in ks if k != 1]
    evaluation = Evaluation.objects.create(owner=owner, model=model, suite=suite, samples=samples, ks=list(ks),
                                           status="done", total=len(rows), done=len(rows), run=run, step=step,
                                           label=label, finished=timezone.now())
    for position, (pid, c) in enumerate(rows.items()):
        result = {"status": "passed" if c else "failed", "tests_passed": 1 if c else 0, "tests_total": 2,
                  "tests": [{"name": "test 1", "passed": bool(c), "error": None if c else "AssertionError: boom"}],
                  "stderr": "Traceback: boom" if not c else ""}
        EvalProblem.objects.create(evaluation=evaluation, position=position, problem_id=pid, n=samples, c=c,
                                   pass_at_1=pass_at_k(samples, c, 1),
                                   pass_at_k={str(k): pass_at_k(samples, c, k) for k in others},
                                   candidates=[{"code": f"def f():\n    return {position}\n", "reward": 0.1,
                                                "result": result}])
    evaluation.pass_at_1 = sum(pass_at_k(samples, c, 1) for c in rows.values()) / len(rows)
    evaluation.pass_at_k = {str(k): sum(pass_at_k(samples, c, k) for c in rows.values()) / len(rows) for k in others}
    evaluation.summary = {"pass@1": evaluation.pass_at_1, "pass@k": evaluation.pass_at_k, "mean_test_pass_rate": 0.5}
    evaluation.save()
    return evaluation
