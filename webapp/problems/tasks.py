"""Celery tasks of problem sets (queue `sandbox` by the `problems.*` route)."""
# The configured app, not `shared_task`: a web process that never imported webapp.celery would
# otherwise send through Celery's unconfigured default app and the task would never arrive.
from webapp.celery import app


@app.task(name="problems.validate")
def validate(problem_set_id: int, generation: int | None = None, force: bool = False) -> str | None:
    """Validate one problem set; a redelivered task for a finished set is a no-op unless `force`."""
    from .services import validate_problem_set

    problem_set = validate_problem_set(problem_set_id, generation, force=force)
    return problem_set.validation_status if problem_set else None
