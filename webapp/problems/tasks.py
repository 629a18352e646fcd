"""Celery tasks of problem sets (queue `sandbox` by the `problems.*` route).

The two durable jobs (import, validation) are declared with their pending sets where they are published
(`services`); here their bodies are registered under their names. The difficulty probe's task is the
probes app's (webapp.probes.tasks)."""
# The configured app, not `shared_task`: a web process that never imported webapp.celery would
# otherwise send through Celery's unconfigured default app and the task would never arrive.
from webapp.celery import app

from .services import IMPORT_JOB, VALIDATION_JOB, import_problem_set, validate_problem_set


validate = VALIDATION_JOB.register(validate_problem_set, outcome="validation_status")
"""Validate one problem set; a redelivered task for a finished set is a no-op unless `force`."""

import_upload = IMPORT_JOB.register(import_problem_set, outcome="import_status")
"""Parse a large upload stored by the web process into its set; then validation is queued."""


@app.task(name="problems.republish_pending_validations", ignore_result=True)
def republish_pending_validations() -> list[int]:
    """Publish the imports and validations the broker holds no task for (beat; the name is older than the
    imports it also sweeps)."""
    return IMPORT_JOB.republish_lost() + VALIDATION_JOB.republish_lost()
