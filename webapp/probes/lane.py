"""Difficulty probes as jobs of the ``gpu_short`` queue (``webapp.core.queueing``)."""
from __future__ import annotations

from django.utils import timezone

from webapp.core.queueing import Lane, Progress, route
from webapp.problems.models import Probe


def probe_progress(probe: Probe) -> Progress:
    """``12/40 problems`` and the seconds left at its pace since it started (None before its first problem)."""
    eta = None
    if probe.done and probe.started:
        eta = max(0, probe.total - probe.done) * (timezone.now() - probe.started).total_seconds() / probe.done
    return Progress(f"{probe.done}/{probe.total} problems", eta)


PROBE_LANE = Lane(kind="probe", model=Probe, queue=lambda: route("problems.probe"), progress=probe_progress,
                  owner_id=lambda probe: probe.problem_set.owner_id)
