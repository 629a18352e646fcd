"""Celery tasks of benchmark evaluations: the evaluation itself (`evals.evaluate`, routed to `gpu`) and the
sweep (`evals.sweep`, beat, on `sandbox`)."""
# The configured app, not `shared_task` (see webapp.problems.tasks).
from webapp.celery import app

from .services import EVAL_JOB, fail_lost_evaluations, run_evaluation


evaluate = EVAL_JOB.register(run_evaluation, outcome="status")
"""Supervise one evaluation (`python -m training eval` as a child); idempotent."""


@app.task(name="evals.sweep", ignore_result=True)
def sweep() -> list[int]:
    """Fail the evaluations whose worker died; publish the pending ones the broker holds no task for."""
    fail_lost_evaluations()
    return EVAL_JOB.republish_lost()
