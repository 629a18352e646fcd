"""Celery tasks of runs (queue ``gpu``): a thin supervisor around ``python -m training run``."""
from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

log = logging.getLogger("crucible.runs")


@shared_task(name="runs.supervise", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def supervise(run_id: int) -> str:
    """Supervise run ``run_id`` until its trainer ends (idempotent: see supervisor.supervise_run)."""
    from .supervisor import supervise_run

    outcome = supervise_run(run_id)
    log.info("%s", outcome)
    return outcome


@shared_task(name="runs.fail_lost_runs", ignore_result=True)
def fail_lost_runs() -> list[int]:
    """Mark runs whose worker died as failed (also run when a worker starts)."""
    from .supervisor import fail_lost_runs as fail

    return fail()


@worker_ready.connect
def _fail_runs_of_dead_workers(sender=None, **kwargs) -> None:
    from .supervisor import fail_lost_runs as fail

    try:
        lost = fail()
    except Exception:  # a worker must start even if the database is briefly unavailable
        log.exception("stale-run check at worker start failed")
        return
    if lost:
        log.warning("runs %s lost their worker; marked failed", lost)


@shared_task(name="runs.republish_queued_runs", ignore_result=True)
def republish_queued_runs() -> list[int]:
    """Publish the supervisor of queued runs the broker holds no task for (beat, and at worker start)."""
    from .services import republish_queued_runs as republish

    return republish()


@worker_ready.connect
def _republish_queued_runs(sender=None, **kwargs) -> None:
    from .services import republish_queued_runs as republish

    try:
        republish()
    except Exception:  # a worker must start even if the database or Redis is briefly away
        log.exception("queued-run check at worker start failed")
