"""The run supervisor: start ``python -m training run`` as a child, follow its events.jsonl, stop it.

``supervise_run`` is what the Celery task ``runs.supervise`` calls. It is idempotent: it claims the
run row (queued -> running) under a row lock, so a redelivered task finds the run running with a live
supervisor (and leaves) or finished (and leaves). A task redelivered because its worker died finds
the run running with a dead supervisor and marks it failed, keeping everything recorded.

The trainer is a child process with PR_SET_PDEATHSIG, so it gets SIGTERM (and saves a checkpoint)
when the worker process dies, instead of training on unsupervised.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from . import services
from .models import Run

log = logging.getLogger("crucible.runs")

POLL_S = 0.02            # events.jsonl poll period (the live-latency budget is 50 ms)
DB_CHECK_S = 0.5         # how often the supervisor looks for a cancel request and beats its heart
STALE_AFTER = timedelta(seconds=120)   # a running run without a heartbeat for this long lost its worker
CANCEL_GRACE_S = 600     # SIGTERM lets the trainer checkpoint; after this long it is killed
STDERR_TAIL_LINES = 20


class EventFollower:
    """Tails a JSON Lines file by byte offset; a partial last line waits for its newline.

    ``read()`` returns ``[(seq, event, offset_after_line)]`` for each new complete line, where
    ``seq`` is the 0-based line number. A complete line that is not a JSON object (should never
    happen) becomes ``{"event": "invalid", "line": ...}`` so that numbering stays exact.
    """

    def __init__(self, path: str | Path, *, offset: int = 0, seq: int = 0):
        self.path = Path(path)
        self.offset, self.seq = offset, seq
        self._file = None
        self._partial = b""

    def read(self) -> list[tuple[int, dict, int]]:
        if self._file is None:
            try:
                self._file = open(self.path, "rb")
            except FileNotFoundError:
                return []
            self._file.seek(self.offset)
        data = self._file.read()
        if not data:
            return []
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # b"" when the data ended with a newline
        out = []
        position = self.offset
        for raw in lines:
            position += len(raw) + 1
            seq = self.seq
            self.seq += 1
            if not raw.strip():
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                event = None
            if not isinstance(event, dict):
                event = {"event": "invalid", "line": raw.decode("utf-8", "replace")[:2000]}
            out.append((seq, event, position))
        self.offset = position
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def ingest_new_events(run: Run, follower: EventFollower, *, apply_done: bool = True) -> list[dict]:
    events = []
    for seq, event, offset in follower.read():
        services.ingest_event(run, event, seq=seq, offset=offset, apply_done=apply_done)
        events.append(event)
    return events


# ---- the child --------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int):
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


def trainer_command(run: Run, *, resume: bool) -> list[str]:
    # CRUCIBLE_TRAINER_MODULE lets the supervisor tests script a trainer's exit paths (crash, signal).
    module = getattr(settings, "CRUCIBLE_TRAINER_MODULE", "training")
    args = ["-m", module, "run", "--config", str(run.path / "run.yaml"), "--out", str(run.path)]
    if resume:
        args.append("--resume")
    gpus = int(getattr(settings, "GPU_COUNT", 1))
    if gpus > 1:
        return [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(gpus), *args]
    return [sys.executable, *args]


def trainer_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # The trainer works in its run dir (below), so the project must be importable from elsewhere.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(settings.BASE_DIR), os.environ.get("PYTHONPATH")) if p)
    if settings.HF_OFFLINE:  # without a network the hub client would retry for about a minute first
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def start_trainer(run: Run, *, resume: bool) -> subprocess.Popen:
    env = trainer_env()
    command = trainer_command(run, resume=resume)
    stdout = open(run.path / "stdout.log", "ab")
    stderr = open(run.path / "stderr.log", "ab")
    try:
        stderr.write(f"\n--- {timezone.now().isoformat()} {' '.join(command)}\n".encode())
        stderr.flush()
        # cwd is the run dir: a hub id (org/name) that also names a directory relative to the trainer's
        # working directory would be loaded from there, and the run dir holds only the run's own files.
        return subprocess.Popen(command, cwd=run.path, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=stderr, start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
    finally:
        stdout.close()
        stderr.close()


def stderr_tail(run: Run, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        with open(run.path / "stderr.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


# ---- supervision ----------------------------------------------------------------------------------


def supervise_run(run_id: int) -> str:
    """Run (or refuse to re-run) run ``run_id`` to its end; returns what happened, for the task log."""
    host, pid = socket.gethostname(), os.getpid()
    try:
        run = Run.objects.get(pk=run_id)
    except Run.DoesNotExist:
        return f"run {run_id} does not exist"
    if run.status in ("running", "cancelling"):
        if supervisor_is_alive(run) and not (run.worker_host == host and run.worker_pid == pid):
            return f"run {run_id} is already supervised by {run.worker_host}:{run.worker_pid}"
        fail_lost_run(run, "the worker supervising this run stopped (redelivered task found no live supervisor)")
        return f"run {run_id} lost its worker; marked failed"
    if not run.claim(host=host, pid=pid):
        return f"run {run_id} is {run.status}; nothing to do"
    services.notify_status(run)
    follower = EventFollower(run.path / "events.jsonl", offset=run.events_offset, seq=run.events_seq)
    # Lines a previous trainer wrote after its supervisor died are recorded, but their `done` no longer decides.
    ingest_new_events(run, follower, apply_done=False)
    try:
        proc = start_trainer(run, resume=run.resume_count > 0)
    except OSError as exc:
        services.finish_run(run, "failed", f"could not start the trainer: {exc}")
        return f"run {run_id} failed to start"
    Run.objects.filter(pk=run.pk).update(trainer_pid=proc.pid)
    attempt = run.resume_count
    try:
        return _follow(run, proc, follower, attempt)
    finally:
        if proc.poll() is None:  # the supervisor itself failed: do not leave a trainer behind
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            run.refresh_from_db()
            if run.resume_count == attempt:
                services.finish_run(run, "failed", "the supervisor stopped unexpectedly; see the worker log")
        follower.close()


def _follow(run: Run, proc: subprocess.Popen, follower: EventFollower, attempt: int) -> str:
    last_check = 0.0
    term_sent: float | None = None
    done_seen = False
    while True:
        rc = proc.poll()
        done_seen |= any(e.get("event") == "done" for e in ingest_new_events(run, follower))
        if rc is not None:
            done_seen |= any(e.get("event") == "done" for e in ingest_new_events(run, follower))
            break
        now = time.monotonic()
        if now - last_check >= DB_CHECK_S:
            last_check = now
            status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first()
            Run.objects.filter(pk=run.pk).update(heartbeat=timezone.now())
            if status == "cancelling" and term_sent is None:
                _signal_group(proc, signal.SIGTERM)
                term_sent = now
            elif status is None:  # the run was deleted
                _signal_group(proc, signal.SIGTERM)
                term_sent = term_sent or now
        if term_sent is not None and now - term_sent > CANCEL_GRACE_S:
            _signal_group(proc, signal.SIGKILL)
        time.sleep(POLL_S)
    run.refresh_from_db()
    if run.resume_count != attempt:
        # The trainer's `done` finished the run and the user resumed it before this trainer process
        # had exited: the run now belongs to the new attempt, whose verdict this one must not touch.
        return f"run {run.pk} was resumed while its previous trainer exited; left to the new attempt"
    if done_seen and run.is_finished:
        return f"run {run.pk} {run.status}"
    if run.status == "cancelling":
        services.finish_run(run, "cancelled", f"the trainer stopped without its final record (exit code {rc})")
    else:
        tail = stderr_tail(run)
        how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
        services.finish_run(run, "failed", f"the trainer exited ({how}) before finishing"
                            + (f":\n{tail}" if tail else ""))
    return f"run {run.pk} {run.status}"


def supervisor_is_alive(run: Run) -> bool:
    """Whether the run's supervisor may still be at work (same host: its pid; elsewhere: its heartbeat)."""
    if run.worker_host == socket.gethostname():
        return pid_alive(run.worker_pid)
    return run.heartbeat is not None and timezone.now() - run.heartbeat < STALE_AFTER


def fail_lost_run(run: Run, reason: str) -> bool:
    """Mark a run whose supervisor is gone failed, then record what its trainer wrote meanwhile."""
    tail = stderr_tail(run) if run.run_dir else ""
    changed = services.finish_run(run, "failed", reason + (f"\nlast trainer stderr:\n{tail}" if tail else ""))
    if run.run_dir:
        follower = EventFollower(run.path / "events.jsonl", offset=run.events_offset, seq=run.events_seq)
        try:
            ingest_new_events(run, follower, apply_done=False)
        finally:
            follower.close()
    return changed


def fail_lost_runs() -> list[int]:
    """Runs whose supervisor died (worker restart, host loss): failed with the reason. Returns their ids."""
    lost = []
    for run in Run.objects.filter(status__in=("running", "cancelling")):
        if not supervisor_is_alive(run):
            where = f"{run.worker_host}:{run.worker_pid}" if run.worker_host else "unknown worker"
            if fail_lost_run(run, f"the worker supervising this run ({where}) died; resume continues from "
                                  "the last checkpoint"):
                lost.append(run.pk)
    return lost
