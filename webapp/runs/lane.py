"""Runs as jobs of the ``gpu`` queue (``webapp.core.queueing``): how far a running run is and when it
should end, for the line of a job that waits for it."""
from __future__ import annotations

from django.utils import timezone

from webapp.core.queueing import Lane, Progress, route

from .models import Run

PACE_STEPS = 20
"""The pace of a run is taken over its last this many steps (as the run page's ETA is)."""


def run_progress(run: Run) -> Progress:
    """``step 40/200`` and the seconds left at the pace of its last steps (the step events' times), or, with
    fewer than two steps timed, at its pace since it started; None before its first step."""
    left = max(0, run.steps - run.step)
    times = list(run.step_metrics.filter(time__isnull=False).order_by("-step").values_list("step", "time")[:PACE_STEPS])
    eta = None
    if len(times) >= 2 and times[0][0] > times[-1][0]:
        (last_step, last_time), (first_step, first_time) = times[0], times[-1]
        eta = left * max(0.0, last_time - first_time) / (last_step - first_step)
    elif run.step > 0 and run.started:
        eta = left * (timezone.now() - run.started).total_seconds() / run.step
    return Progress(f"step {run.step}/{run.steps}", eta)


RUN_LANE = Lane(kind="run", model=Run, queue=lambda: route("runs.supervise"), progress=run_progress,
                owner_id=lambda run: run.owner_id, since="queued")
