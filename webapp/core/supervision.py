"""The task of a job that starts over when redelivered (``webapp.core.models.RestartableJob``: a difficulty
probe, an evaluation), around the training CLI as its child (``webapp.core.trainer_process``).

``run_job`` is the task's body: it stops the child a dead worker left behind, claims the row, hands it
to the app's own ``supervise`` and turns what goes wrong into the row's verdict (a worker being stopped
puts it back to pending). ``run_child`` starts the child in the job's directory, follows its output
file to its exit and stops it if it outlives its supervisor; ``exit_error`` says how a failed one ended.
"""
from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Callable, TypeVar

from . import trainer_process
from .models import RestartableJob

Job = TypeVar("Job", bound=RestartableJob)


def run_job(job: Job, supervise: Callable[[Job], Job | None], *, notify: Callable[[Job], None],
            fail: Callable[[Job, str], Job | None], log: logging.Logger) -> Job | None:
    """Do ``job``; idempotent. A finished job is left as it is, a running one whose worker is alive too;
    one whose worker died is run again, its orphaned child (if it still runs) stopped first: the rerun
    starts in a clean directory. ``supervise`` does the work and finishes the row; ``fail`` finishes it
    failed with an error (an exception in ``supervise``: the worker lives on, the page says what went
    wrong)."""
    if job.status == job.RUNNING and not job.worker_is_alive():
        job.stop_orphan()
    if not job.claim(host=socket.gethostname(), pid=os.getpid()):
        return job
    notify(job)
    try:
        return supervise(job)
    except SystemExit:  # the worker is being stopped: the redelivered task runs the job again
        job.release()
        raise
    except Exception as exc:
        log.exception("%s %s failed", job._meta.verbose_name, job.pk)
        return fail(job, f"{type(exc).__name__}: {exc}")


def run_child(job: RestartableJob, command: list[str], *, directory: Path, out: Path,
              on_lines: Callable[[list], None], check: Callable[[], float | None], poll_s: float, check_s: float,
              grace_s: float) -> int:
    """Run ``command`` as ``job``'s child in ``directory`` (its stdout and stderr to ``stdout.log`` and
    ``stderr.log`` there) and follow it to its exit (``trainer_process.follow_child`` with ``out``, the
    JSON Lines file it writes) -> its exit code. A child still running when that ends (the supervisor
    failing) gets ``grace_s`` between SIGTERM and SIGKILL."""
    with open(directory / "stdout.log", "wb") as stdout, open(directory / "stderr.log", "wb") as stderr:
        proc = trainer_process.spawn(command, cwd=directory, stdout=stdout, stderr=stderr)
    job.record_trainer(proc.pid)
    follower = trainer_process.EventFollower(out)
    try:
        return trainer_process.follow_child(proc, follower, on_lines=on_lines, check=check, poll_s=poll_s,
                                            check_s=check_s)
    finally:
        follower.close()
        if proc.poll() is None:
            trainer_process.stop(proc, grace_s)


def exit_error(what: str, rc: int, directory: Path) -> str:
    """The error of a child that exited with ``rc``: ``<what> exited (exit code N)`` and the tail of its
    ``stderr.log``."""
    tail = trainer_process.stderr_tail(directory / "stderr.log")
    return f"{what} exited ({trainer_process.exit_text(rc)})" + (f":\n{tail}" if tail else "")
