"""Celery tasks of runs (queue ``gpu``): a thin supervisor around ``python -m training run``."""
from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from .services import RUN_JOB
from .supervisor import fail_lost_runs as settle_lost_runs, resume_interrupted_runs, supervise_run

log = logging.getLogger("crucible.runs")


@RUN_JOB.task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def supervise(run_id: int) -> str:
    """Supervise run ``run_id`` until its trainer ends (idempotent: see supervisor.supervise_run)."""
    outcome = supervise_run(run_id)
    log.info("%s", outcome)
    return outcome


@shared_task(name="runs.fail_lost_runs", ignore_result=True)
def fail_lost_runs() -> list[int]:
    """Record the last lines of runs whose worker died and give them their verdict (also run when a
    worker starts); resume the runs a worker shutdown stopped."""
    lost = settle_lost_runs()
    resume_interrupted_runs()  # their task waits in the gpu queue until a gpu worker takes it
    return lost


def consumes_gpu_queue(consumer) -> bool:
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None) or []
    return any(q.name == "gpu" for q in queues)


@worker_ready.connect
def _settle_runs_of_dead_workers(sender=None, **kwargs) -> None:
    try:
        lost = settle_lost_runs()
        resumed = resume_interrupted_runs() if consumes_gpu_queue(sender) else []
    except Exception:  # a worker must start even if the database is briefly unavailable
        log.exception("stale-run check at worker start failed")
        return
    if lost:
        log.warning("runs %s lost their worker; their last lines are recorded", lost)
    if resumed:
        log.warning("runs %s were stopped by a worker shutdown; resumed from their last checkpoint", resumed)


@shared_task(name="runs.republish_queued_runs", ignore_result=True)
def republish_queued_runs() -> list[int]:
    """Publish the supervisor of queued runs the broker holds no task for (beat, and at worker start)."""
    return RUN_JOB.republish_lost()


@worker_ready.connect
def _republish_queued_runs(sender=None, **kwargs) -> None:
    try:
        RUN_JOB.republish_lost()
    except Exception:  # a worker must start even if the database or Redis is briefly away
        log.exception("queued-run check at worker start failed")
