"""Celery tasks of difficulty probes: the probe itself (`problems.probe`, its name from when probes were
the problems app's; routed to `gpu_short`) and the sweep (`probes.sweep`, beat, on `sandbox`)."""
# The configured app, not `shared_task` (see webapp.problems.tasks).
from webapp.celery import app

from .services import PROBE_JOB, fail_lost_probes, run_probe


probe = PROBE_JOB.register(run_probe, outcome="status")
"""Supervise one difficulty probe (`python -m training probe` as a child); idempotent."""


@app.task(name="probes.sweep", ignore_result=True)
def sweep() -> list[int]:
    """Fail the probes whose worker died (else one stays `running` and blocks its set's next probe);
    publish the pending probes the broker holds no task for (beat)."""
    fail_lost_probes()
    return PROBE_JOB.republish_lost()
