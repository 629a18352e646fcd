"""Celery tasks of problem sets (queue `sandbox` by the `problems.*` route; `problems.probe` on `gpu`)."""
# The configured app, not `shared_task`: a web process that never imported webapp.celery would
# otherwise send through Celery's unconfigured default app and the task would never arrive.
from webapp.celery import app


@app.task(name="problems.validate")
def validate(problem_set_id: int, generation: int | None = None, force: bool = False) -> str | None:
    """Validate one problem set; a redelivered task for a finished set is a no-op unless `force`."""
    from .services import validate_problem_set

    problem_set = validate_problem_set(problem_set_id, generation, force=force)
    return problem_set.validation_status if problem_set else None


@app.task(name="problems.import_upload")
def import_upload(problem_set_id: int) -> str | None:
    """Parse a large upload stored by the web process into its set; then validation is queued."""
    from .services import import_problem_set

    problem_set = import_problem_set(problem_set_id)
    return problem_set.import_status if problem_set else None


@app.task(name="problems.probe")
def probe(probe_id: int) -> str | None:
    """Supervise one difficulty probe (`python -m training probe` as a child); idempotent."""
    from .probes import run_probe

    result = run_probe(probe_id)
    return result.status if result else None


@app.task(name="problems.republish_pending_validations", ignore_result=True)
def republish_pending_validations() -> list[int]:
    """Fail the probes whose worker died; publish the imports, validations and probes the broker holds
    no task for (beat)."""
    from .probes import fail_lost_probes, republish_pending_probes
    from .services import republish_pending_imports, republish_pending_validations as republish

    fail_lost_probes()  # else a probe whose worker died stays `running` and blocks the set's next one
    return republish_pending_imports() + republish() + republish_pending_probes()
