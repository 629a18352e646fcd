"""Celery tasks of problem sets (queue `sandbox` by the `problems.*` route; `problems.probe` on `gpu`).

The three durable jobs (import, validation, probe) are declared with their pending sets where they are
published (`services`, `probes`); here their bodies are registered under their names."""
# The configured app, not `shared_task`: a web process that never imported webapp.celery would
# otherwise send through Celery's unconfigured default app and the task would never arrive.
from webapp.celery import app

from .probes import PROBE_JOB, fail_lost_probes, run_probe
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


@PROBE_JOB.task()
def probe(probe_id: int) -> str | None:
    """Supervise one difficulty probe (`python -m training probe` as a child); idempotent."""
    result = run_probe(probe_id)
    return result.status if result else None


@app.task(name="problems.republish_pending_validations", ignore_result=True)
def republish_pending_validations() -> list[int]:
    """Fail the probes whose worker died; publish the imports, validations and probes the broker holds
    no task for (beat; the name is older than the imports and probes it also sweeps)."""
    fail_lost_probes()  # else a probe whose worker died stays `running` and blocks the set's next one
    return IMPORT_JOB.republish_lost() + VALIDATION_JOB.republish_lost() + PROBE_JOB.republish_lost()
