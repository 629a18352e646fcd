import signal
import socket

from django.db import models, transaction
from django.utils import timezone

from . import trainer_process
from .refusals import Conflict


class OwnedQuerySet(models.QuerySet):
    """Users see only their own objects; staff see everyone's."""

    def visible_to(self, user):
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(owner=user)


class TransitionError(Conflict, ValueError):
    """A state change that the row's current state does not allow; the message says why and what to do."""


class LockedRow:
    """A model whose state-changing methods lock their row (``select_for_update``), decide on what they
    re-read there, and copy the stored row back onto the instance they were called on."""

    def _locked(self):
        """This row, locked until the transaction ends (None when it was deleted)."""
        return type(self).objects.select_for_update().filter(pk=self.pk).first()

    def _refresh_from(self, locked) -> None:
        for f in self._meta.concrete_fields:
            setattr(self, f.attname, getattr(locked, f.attname))


class TrainerJob(LockedRow, models.Model):
    """A row that a Celery task works on by supervising the training CLI as a child process (a training
    run, a difficulty probe): the task claims the row under a row lock, beats a heartbeat while its child
    works, and finishes the row with a verdict; whoever finds the row held by a worker that is gone
    (``lost()``) settles it, and stops the child the worker left behind only when that pid is still the
    job's own child (``is_trainer``: a pid the system gave to another process since is not).

    A subclass declares its ``status`` field and, as class attributes, ``WAITING`` (the statuses a claim
    takes the row from), ``RUNNING`` (the status a claim gives it), ``SUPERVISED`` (the statuses in which a
    worker holds it) and ``FINISHED`` (the final ones), and ``trainer_marker``, the path its child's command
    line names. Each state change locks the row and re-reads what it decides on, so a supervisor, a
    user's click and a sweep never interleave.
    """

    WAITING: tuple[str, ...] = ()
    RUNNING: str = "running"
    SUPERVISED: tuple[str, ...] = ("running",)
    FINISHED: tuple[str, ...] = ()

    error = models.TextField(blank=True, default="")
    worker_host = models.CharField(max_length=255, blank=True, default="")
    worker_pid = models.IntegerField(null=True, blank=True, help_text="pid of the supervising task")
    trainer_pid = models.IntegerField(null=True, blank=True)  # its child, the training CLI
    heartbeat = models.DateTimeField(null=True, blank=True)  # the task's last sign of life
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def trainer_marker(self) -> str:
        """A path that the command line of this job's child names (and no other process's does)."""
        raise NotImplementedError

    # ---- the supervising task -----------------------------------------------------------------------

    def claimable_by(self, host: str, pid: int) -> bool:
        """Whether the task ``host:pid`` may claim this row as it stands (a subclass may add cases)."""
        return self.status in self.WAITING

    def on_claim(self) -> None:
        """Further fields a claim sets on the locked row (a subclass hook)."""

    def claim(self, *, host: str, pid: int) -> bool:
        """The task ``host:pid`` takes the job (-> ``RUNNING``); False, and the row as it stands, if it
        may not."""
        with transaction.atomic():
            job = self._locked()
            if job is None:
                return False
            if not job.claimable_by(host, pid):
                self._refresh_from(job)
                return False
            job.status, job.error, job.finished = self.RUNNING, "", None
            job.worker_host, job.worker_pid, job.trainer_pid = host, pid, None
            job.heartbeat = timezone.now()
            job.on_claim()
            job.save()
            self._refresh_from(job)
            return True

    def record_trainer(self, pid: int) -> None:
        """The child the supervisor started (what ``is_trainer`` checks and a sweep may stop)."""
        type(self).objects.filter(pk=self.pk).update(trainer_pid=pid)
        self.trainer_pid = pid

    def take_over(self, *, pid: int) -> bool:
        """The task ``pid`` on the same host becomes the supervisor of a job whose task died, if the row
        still names that dead task (another task may have taken it over meanwhile)."""
        taken = type(self).objects.filter(pk=self.pk, worker_host=self.worker_host, worker_pid=self.worker_pid,
                                          status__in=self.SUPERVISED).update(worker_pid=pid, heartbeat=timezone.now())
        if taken:
            self.worker_pid = pid
        return bool(taken)

    def beat(self) -> str | None:
        """Record that the supervisor is alive; the job's status as stored now (None: the row is gone)."""
        manager = type(self).objects
        manager.filter(pk=self.pk).update(heartbeat=timezone.now())
        return manager.filter(pk=self.pk).values_list("status", flat=True).first()

    def finish(self, status: str, error: str = "", **fields) -> bool:
        """Any unfinished status -> ``status`` (one of ``FINISHED``), with ``error`` and further
        ``fields``; False (nothing changed) when the job is already finished or gone."""
        if status not in self.FINISHED:
            raise ValueError(f"{status!r} is not a final status; use one of {', '.join(self.FINISHED)}")
        with transaction.atomic():
            job = self._locked()
            if job is None:
                return False
            if job.status in self.FINISHED:
                self._refresh_from(job)
                return False
            job.status, job.error, job.finished, job.trainer_pid = status, error or "", timezone.now(), None
            for name, value in fields.items():
                setattr(job, name, value)
            job.save()
            self._refresh_from(job)
            return True

    # ---- lost workers -------------------------------------------------------------------------------

    @property
    def worker_label(self) -> str:
        return f"{self.worker_host}:{self.worker_pid}" if self.worker_host else "unknown worker"

    def worker_is_alive(self) -> bool:
        """Whether the task that claimed the job may still be at work (this host: its pid; elsewhere: its
        heartbeat)."""
        return trainer_process.worker_alive(self.worker_host, self.worker_pid, self.heartbeat)

    def is_trainer(self, pid: int | None = None) -> bool:
        """Whether process ``pid`` (default: the recorded child) is alive on this host and is this job's
        child; a pid reused by another process since is not."""
        return trainer_process.is_child_of(self.trainer_pid if pid is None else pid, self.trainer_marker)

    @classmethod
    def lost(cls):
        """The jobs a worker holds that is gone (killed, its host lost): each needs a verdict."""
        return [job for job in cls.objects.filter(status__in=cls.SUPERVISED) if not job.worker_is_alive()]


class RestartableJob(TrainerJob):
    """A trainer job that starts over when its task is redelivered (a difficulty probe, an evaluation; a
    run resumes instead): a pending row, or a running one whose task died, is claimed again, and a worker
    being stopped puts its row back to pending. ``done`` counts its progress (a subclass declares it,
    with its status field).
    """

    PENDING: str = "pending"
    FAILED: str = "failed"
    WAITING = ("pending",)

    class Meta:
        abstract = True

    @property
    def in_progress(self) -> bool:
        """Waiting for its task, or held by one."""
        return self.status in self.WAITING + self.SUPERVISED

    def claimable_by(self, host: str, pid: int) -> bool:
        """Pending; or running in a task that died (the redelivered task runs it again) or in this one."""
        if self.status != self.RUNNING:
            return super().claimable_by(host, pid)
        return (self.worker_host, self.worker_pid) == (host, pid) or not self.worker_is_alive()

    def on_claim(self) -> None:
        self.started, self.done = timezone.now(), 0

    def release(self) -> None:
        """running -> pending: the worker is being stopped; the redelivered task runs the job again."""
        type(self).objects.filter(pk=self.pk, status=self.RUNNING).update(status=self.PENDING)

    def record_progress(self, done: int) -> None:
        type(self).objects.filter(pk=self.pk).update(done=done)
        self.done = done

    def stop_orphan(self) -> None:
        """Kill the child a dead worker left behind (on this host), if that pid is still the job's child."""
        if self.worker_host == socket.gethostname() and self.is_trainer():
            trainer_process.signal_group(self.trainer_pid, signal.SIGKILL)

    def fail_lost(self, again: str) -> bool:
        """Fail this job if the worker supervising it died (killed, host lost) -> whether this call failed
        it; its child, if it outlived the worker, is stopped. ``again`` ends the error: what the user may
        do now (``"estimate again"``)."""
        with transaction.atomic():
            locked = self._locked()
            if locked is None or locked.status not in self.SUPERVISED or locked.worker_is_alive():
                return False
            locked.stop_orphan()
            locked.finish(self.FAILED, f"the worker running this {self._meta.verbose_name} ({locked.worker_label}) "
                                       f"died before it finished; {again}")
        return True
