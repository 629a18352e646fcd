"""Celery tasks of problem sets (queue `sandbox` by the `problems.*` route).

The two durable jobs (import, validation) are declared with their pending sets where they are published
(`services`); here their bodies are registered under their names. The difficulty probe's task is the
probes app's (webapp.probes.tasks)."""
# The configured app, not `shared_task`: a web process that never imported webapp.celery would
# otherwise send through Celery's unconfigured default app and the task would never arrive.
from webapp.celery import app

from .services import IMPORT_JOB, VALIDATION_JOB, import_problem_set, validate_problem_set


@VALIDATION_JOB.task()
def validate(problem_set_id: int, generation: int | None = None, force: bool = False) -> str | None:
    """Validate one problem set; a redelivered task for a finished set is a no-op unless `force`."""
    problem_set = validate_problem_set(problem_set_id, generation, force=force)
    return problem_set.validation_status if problem_set else None


@IMPORT_JOB.task()
def import_upload(problem_set_id: int) -> str | None:
    """Parse a large upload stored by the web process into its set; then validation is queued."""
    problem_set = import_problem_set(problem_set_id)
    return problem_set.import_status if problem_set else None


@app.task(name="problems.republish_pending_validations", ignore_result=True)
def republish_pending_validations() -> list[int]:
    """Publish the imports and validations the broker holds no task for (beat; the name is older than the
    imports it also sweeps)."""
    return IMPORT_JOB.republish_lost() + VALIDATION_JOB.republish_lost()
