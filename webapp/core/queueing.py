"""Queues that explain themselves: where a waiting job stands and what it waits for (docs/design.md
"Queues: lanes, places and what a job waits for").

Celery queues of model work (``gpu``, ``gpu_short``) hold tasks whose rows say what they are (a run, a
probe, an evaluation: ``TrainerJob`` subclasses). Where a job stands is read off those rows, never off
the broker: the jobs waiting on the same queue that were put on it before it are ahead of it (workers
take tasks in the order they were published, and each job is published when its row is created or
queued again: a resumed run goes behind the jobs queued meanwhile), and the jobs running on that queue
are what it waits for. Each app declares its kind of job once as a
``Lane`` (in its ``AppConfig.ready``); this module imports no app.

The queues' contract (``webapp.celery``): ``gpu`` is served by the gpu workers, one long job (a run) per
worker; ``gpu_short`` by a short-job worker beside them (one job at a time) and by any gpu worker that
is idle, so that a 20-second probe never waits behind a two-hour run. Neither worker prefetches a task
it cannot start (``acks_late`` with a prefetch of one): a gpu worker busy with a run leaves the short
jobs to the short-job worker.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Callable

from django.db.models import Q
from django.utils import timezone
from ninja import Field, Schema

GPU, GPU_SHORT, SANDBOX = "gpu", "gpu_short", "sandbox"

SERVED_BY = {GPU: "the gpu workers", GPU_SHORT: "the short-job lane of the gpu workers"}
"""How a page names the workers of a queue."""
STARTS_IT = {GPU: "a gpu worker (`make run` starts one; compose: the worker-gpu service)",
             GPU_SHORT: "the short-job worker (`make run` starts one; compose: the worker-gpu-short service) "
                        "or an idle gpu worker"}
"""Who takes a job off a queue, for the line that says no worker has for a while."""
STALLED_S = 60.0
"""A job first in line that no worker took for this long, while nothing runs on its queue, says so."""
SHOWN = 2
"""Running jobs named in a line (the soonest to end first); the others are counted."""


@dataclass(frozen=True)
class Progress:
    """How far a running job is, as its lane tells it."""

    text: str
    """``step 40/200`` or ``12/40 problems``: the job's own progress."""
    eta_s: float | None
    """Seconds until it ends, estimated from its pace so far; None until there is a pace."""


@dataclass(frozen=True)
class Lane:
    """One kind of job on one Celery queue: its rows, how they are named and how far they are."""

    kind: str
    """What a page calls such a job: ``run``, ``probe``, ``evaluation``."""
    model: type
    """The job's ``TrainerJob`` subclass; its ``WAITING``/``SUPERVISED`` statuses say waiting and running."""
    queue: Callable[[], str]
    """The Celery queue its task is routed to (``DurableJob.queue``: ``CELERY_TASK_ROUTES`` decides)."""
    progress: Callable[[object], Progress]
    """How far a running job of this lane is."""
    owner_id: Callable[[object], int | None]
    """The user a job belongs to: a job is named (``run #12``) only to the owner of the job that waits."""
    since: str = "created"
    """The row's time field that says when the job was last put on its queue (its place in line, and how
    long it has waited): ``created`` for a job that is queued once, ``queued`` for a run (a resume queues
    it again)."""


_LANES: dict[type, Lane] = {}


def register(lane: Lane) -> Lane:
    """Declare ``lane`` (an app's ``ready``); registering its model again replaces it."""
    _LANES[lane.model] = lane
    return lane


def route(task_name: str) -> str:
    """The queue ``CELERY_TASK_ROUTES`` sends task ``task_name`` to (what a lane's ``queue`` returns)."""
    from webapp.celery import app

    return app.amqp.router.route({}, task_name)["queue"].name


def lane_of(job) -> Lane | None:
    return _LANES.get(type(job))


def lanes_on(queue: str) -> list[Lane]:
    return [lane for lane in _LANES.values() if lane.queue() == queue]


# ---- reading the rows -------------------------------------------------------------------------------


def _waiting(lane: Lane):
    return lane.model.objects.filter(status__in=lane.model.WAITING)


def _running(lane: Lane):
    return lane.model.objects.filter(status__in=lane.model.SUPERVISED)


def _running_jobs(queue: str) -> list[tuple[Lane, object]]:
    return [(lane, job) for lane in lanes_on(queue) for job in _running(lane).order_by("started", "pk")]


def _describe(lane: Lane, job, owner: int | None) -> dict:
    progress = lane.progress(job)
    mine = owner is not None and lane.owner_id(job) == owner
    return {"kind": lane.kind, "id": job.pk if mine else None,
            "label": f"{lane.kind} #{job.pk}" if mine else f"another user's {lane.kind}",
            "progress": progress.text if mine else None, "eta_s": progress.eta_s}


def place(job) -> dict | None:
    """Where waiting ``job`` stands on its queue, or None when it does not wait (or its kind has no lane):

    ``{position (1 = next), running, queue, served_by, ahead, waiting_for: [{kind, id, label, progress,
    eta_s}], busy_elsewhere: [...], waited_s, text}``. ``running`` counts every user's jobs on the queue;
    ``waiting_for`` lists them, the soonest to end first; ``busy_elsewhere`` what the gpu workers run while
    a short job waits with nothing of its own queue running. Another user's job is neither named nor
    linked, and its progress is left out: only its kind and how long it has left."""
    lane = lane_of(job)
    if lane is None or job.status not in lane.model.WAITING:
        return None
    queue = lane.queue()
    since = getattr(job, lane.since)
    ahead = 0
    for other in lanes_on(queue):
        earlier = Q(**{f"{other.since}__lt": since})
        if other is lane:  # the same table: a row queued in the same instant but numbered first is ahead
            earlier |= Q(**{other.since: since, "pk__lt": job.pk})
        ahead += _waiting(other).filter(earlier).count()
    owner = lane.owner_id(job)
    running = [_describe(on, j, owner) for on, j in _running_jobs(queue)]
    running.sort(key=lambda r: (r["eta_s"] is None, r["eta_s"] or 0))
    elsewhere = []
    if queue == GPU_SHORT and not running:
        elsewhere = [_describe(on, j, owner) for on, j in _running_jobs(GPU)]
        elsewhere.sort(key=lambda r: (r["eta_s"] is None, r["eta_s"] or 0))
    waited = max(0.0, (timezone.now() - since).total_seconds())
    result = {"position": ahead + 1, "running": len(running), "queue": queue,
              "served_by": SERVED_BY.get(queue, f"the workers of queue {queue}"), "ahead": ahead,
              "waiting_for": running, "busy_elsewhere": elsewhere, "waited_s": round(waited, 1)}
    result["text"] = place_text(result)
    return result


# ---- the line a page shows ----------------------------------------------------------------------------


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def duration_words(seconds: float | None) -> str:
    """``~6 min left``-style durations: 40 s, 6 min, 1.5 h; '' when unknown."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _job_words(job: dict) -> str:
    details = [d for d in (job["progress"], f"~{duration_words(job['eta_s'])} left" if job["eta_s"] is not None
                           else "") if d]
    return job["label"] + (f" ({', '.join(details)})" if details else "")


def _jobs_words(jobs: list[dict]) -> str:
    shown = [_job_words(j) for j in jobs[:SHOWN]]
    more = len(jobs) - len(shown)
    words = " and ".join(shown) if len(shown) <= 2 else ", ".join(shown)
    return words + (f" and {more} more" if more else "")


def place_text(place: dict) -> str:
    """The line a page shows for ``place()``'s answer, e.g. "2nd in line on the gpu workers; waiting for
    run #12 (step 40/200, ~6 min left)"."""
    head = f"{ordinal(place['position'])} in line on {place['served_by']}"
    if place["waiting_for"]:
        one = len(place["waiting_for"]) == 1
        return f"{head}; waiting for {_jobs_words(place['waiting_for'])}{' to end' if one else ', the first to end'}"
    line = f"{head}; waiting for a worker to take it"
    if place["busy_elsewhere"]:
        line += f" (the gpu workers are busy with {_jobs_words(place['busy_elsewhere'])})"
    if place["position"] == 1 and place["waited_s"] >= STALLED_S:
        starts = STARTS_IT.get(place["queue"], f"a worker consuming queue {place['queue']}")
        line += (f"; none has for {duration_words(place['waited_s'])}: is {starts} running?")
    return line


# ---- sharing a device ---------------------------------------------------------------------------------


def long_job_on_this_host() -> bool:
    """Whether a job of the ``gpu`` queue (a run) is running on this host now, by its rows."""
    host = socket.gethostname()
    return any(_running(lane).filter(worker_host=host).exists() for lane in lanes_on(GPU))


def short_job_threads() -> int | None:
    """Torch CPU threads for a short job started now: half the cores (at least 1) while a run holds
    this host, so that the two do not oversubscribe the CPU (a run's trainer keeps to the cores the
    machine leaves free, training.cores); None (the job's own default, every core) otherwise, or when
    ``OMP_NUM_THREADS`` pins the threads for every process of the worker."""
    if os.environ.get("OMP_NUM_THREADS") or not long_job_on_this_host():
        return None
    return max(1, len(os.sched_getaffinity(0)) // 2)


# ---- the API's shape ----------------------------------------------------------------------------------


class WaitingForOut(Schema):
    kind: str = Field(description="run, probe, evaluation")
    id: int | None = Field(description="its id when it is yours; null for another user's job")
    label: str = Field(description="`run #12`, or `another user's run`")
    progress: str | None = Field(description="`step 40/200`, `12/40 problems`; null for another user's job")
    eta_s: float | None = Field(description="seconds until it should end, at its pace so far; null before it has one")


class QueuePlaceOut(Schema):
    """Where a waiting job stands on its Celery queue and what it waits for (``webapp.core.queueing.place``)."""

    position: int = Field(description="1 = the next job a worker of its queue takes")
    running: int = Field(description="jobs of its queue running now (every user's)")
    queue: str = Field("gpu", description="its Celery queue: gpu, gpu_short")
    served_by: str = Field("", description="who serves that queue, in words")
    ahead: int = Field(0, description="jobs waiting ahead of it on that queue (every user's)")
    waiting_for: list[WaitingForOut] = Field([], description="the running jobs of its queue, the soonest to end first")
    busy_elsewhere: list[WaitingForOut] = Field([], description="a short job with nothing of its queue running: "
                                                                "what the gpu workers run meanwhile")
    waited_s: float = Field(0, description="seconds since it was queued")
    text: str = Field("", description="the line its page shows: \"2nd in line on the gpu workers; waiting for run "
                                      "#12 (step 40/200, ~6 min left) to end\"")
