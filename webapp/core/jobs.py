"""Durable jobs: Celery tasks whose pending work the database records, so that the broker cannot lose it.

A job is published after the commit of the state change that makes it pending (a run queued, a set
importing or pending validation, a probe pending). Publishing can fail (Redis down) and a published
message can be lost (Redis restarted without persistence), so the database, not the broker, says what
is pending: the sweep (``republish_lost``, run by beat and when a worker starts) compares each job's
pending set with the tasks the broker holds (``broker.held_task_ids``) and publishes again the ones it
lacks. A task published twice is harmless: every job's body is idempotent.

A job names its Celery task once (``DurableJob("runs.supervise", ...)`` in the module that publishes
it); the app's ``tasks.py`` registers the body under that name with ``@JOB.task()`` (or, for a service
that returns the row it did the job of, ``JOB.register(service, outcome=FIELD)``), so the publisher
never imports its task module. The queue comes only from ``CELERY_TASK_ROUTES``. A job whose task takes
one row's id, its task id ``<prefix>-<id>``, is a ``RowJob``.
"""
from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass
from typing import Callable, Iterable

from django.db.models import Model, QuerySet

from webapp.celery import app

from . import broker

log = logging.getLogger("crucible.jobs")


@dataclass(frozen=True)
class Pending:
    """One job the database says is waiting for its task."""

    key: int
    """What the sweep reports: the run's, set's or probe's id."""
    task_id: str
    """The id the task was published with: the sweep looks for it among the broker's."""
    args: tuple
    """The task's arguments."""


class DurableJob:
    """A Celery task ``name`` whose pending work is ``pending()``; ``what`` names a republication in the
    log (``"the validation again for problem sets"``)."""

    def __init__(self, name: str, *, pending: Callable[[], Iterable[Pending]], what: str):
        self.name, self._pending, self.what = name, pending, what

    def __repr__(self) -> str:
        return f"DurableJob({self.name!r})"

    @property
    def queue(self) -> str:
        """The queue ``CELERY_TASK_ROUTES`` sends this job's task to."""
        return app.amqp.router.route({}, self.name)["queue"].name

    def task(self, **options):
        """Register the decorated function as this job's Celery task (``options`` as for ``app.task``).
        The configured app, not ``shared_task``: a process that never imported webapp.celery would
        otherwise send through Celery's unconfigured default app and the task would never arrive."""
        return app.task(name=self.name, **options)

    def register(self, service: Callable[..., Model | None], *, outcome: str, **options):
        """Register ``service`` as this job's task: it does (or finds done) the job of one row and returns the
        row, or None when the row is gone. The task returns the row's ``outcome`` field instead, the word a
        worker logs when the task ends (a row would not pass Celery's serializer); ``options`` as for ``task``."""
        @functools.wraps(service)
        def body(*args, **kwargs) -> str | None:
            row = service(*args, **kwargs)
            return getattr(row, outcome) if row is not None else None
        body.__signature__ = inspect.signature(service)  # Celery checks a call's arguments against it
        return self.task(**options)(body)

    def publish(self, *args, task_id: str) -> bool:
        """Send the task now; False (logged, never raised) when the broker is down: the sweep sends it later."""
        return broker.publish(self.name, args=list(args), task_id=task_id)

    def pending(self) -> list[Pending]:
        return list(self._pending())

    def republish_lost(self) -> list[int]:
        """Publish again each pending job whose task the broker holds nowhere (neither queued nor delivered
        and unacknowledged) -> the keys published. Raises ``BrokerUnavailable`` while the broker is down;
        asks it nothing when no job is pending."""
        pending = self.pending()
        if not pending:
            return []
        held = broker.held_task_ids(self.queue)
        published = [p.key for p in pending if p.task_id not in held and self.publish(*p.args, task_id=p.task_id)]
        if published:
            log.warning("published %s %s (the broker held no task for them)", self.what, published)
        return published


class RowJob(DurableJob):
    """A durable job whose task takes one row's id: ``rows()`` are the rows waiting for it, and the task of
    row ``pk`` is published with the id ``<prefix>-<pk>`` (``task_id``)."""

    def __init__(self, name: str, *, rows: Callable[[], QuerySet], prefix: str, what: str):
        super().__init__(name, pending=self._pending_rows, what=what)
        self._rows, self.prefix = rows, prefix

    def task_id(self, pk: int) -> str:
        return f"{self.prefix}-{pk}"

    def _pending_rows(self) -> Iterable[Pending]:
        for pk in self._rows().values_list("pk", flat=True):
            yield Pending(pk, self.task_id(pk), (pk,))

    def publish_row(self, pk: int) -> bool:
        """Publish row ``pk``'s task; False (logged) when the broker is down: the sweep publishes it again."""
        return self.publish(pk, task_id=self.task_id(pk))
