"""The run supervisor: start ``python -m training run`` as a child, follow its events.jsonl, stop it.

``supervise_run`` is what the Celery task ``runs.supervise`` calls. It is idempotent: it claims the
run row (queued -> running) under a row lock, so a redelivered task finds the run running with a live
supervisor (and leaves) or finished (and leaves).

The trainer is a child process with PR_SET_PDEATHSIG, so it gets SIGTERM when the worker process
dies, instead of training on unsupervised: it then saves a checkpoint and writes ``done``, which
takes it a while. Whoever finds the supervisor gone (the redelivered task, the lost-run sweep of a
starting worker or of beat) records those last words before it gives the run its verdict
(``settle_lost_run``): while the trainer may still be writing, the verdict waits. A run that lost
its worker is failed (resume continues from the recorded checkpoint); one whose worker was shut
down (SIGTERM: a restart) is resumed automatically when a gpu worker starts.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from webapp.core import trainer_process
from webapp.core.trainer_process import STALE_AFTER, EventFollower, exit_text, follow_child, signal_group

from . import model_refs, services
from .models import SUPERVISED_STATUSES, Run, TransitionError

log = logging.getLogger("crucible.runs")

POLL_S = 0.02            # events.jsonl poll period (the live-latency budget is 50 ms)
DB_CHECK_S = 0.5         # how often the supervisor looks for a cancel request and beats its heart
CANCEL_GRACE_S = 600     # SIGTERM lets the trainer checkpoint; after this long it is killed
STARTUP_CANCEL_GRACE_S = 2.0   # before its first step a trainer has nothing to save: killed this soon
SHUTDOWN_WAIT_S = 60     # a worker being stopped waits this long for its trainer's last lines


def ingest_new_events(run: Run, follower: EventFollower, *, apply_done: bool = True) -> list[dict]:
    events = []
    for seq, event, offset in follower.read():
        services.ingest_event(run, event, seq=seq, offset=offset, apply_done=apply_done)
        events.append(event)
    return events


# ---- the child --------------------------------------------------------------------------------------

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


def hub_unreachable_for(run: Run) -> bool:
    """Whether the run's model is a hub id and the hub cannot be reached from this worker: its trainer
    then loads from the cache at once (or fails at once naming the model) instead of retrying."""
    model = run.config.get("model") if isinstance(run.config, dict) else None
    name = model.get("name_or_path") if isinstance(model, dict) else None
    return isinstance(name, str) and model_refs.names_hub_model(name) and not model_refs.hub_reachable()


def start_trainer(run: Run, *, resume: bool) -> subprocess.Popen:
    env = trainer_process.trainer_env(offline=hub_unreachable_for(run))
    command = trainer_command(run, resume=resume)
    stdout = open(run.path / "stdout.log", "ab")
    stderr = open(run.path / "stderr.log", "ab")
    try:
        stderr.write(f"\n--- {timezone.now().isoformat()} {' '.join(command)}\n".encode())
        stderr.flush()
        return trainer_process.spawn(command, cwd=run.path, env=env, stdout=stdout, stderr=stderr)
    finally:
        stdout.close()
        stderr.close()


def stderr_tail(run: Run) -> str:
    return trainer_process.stderr_tail(run.path / "stderr.log")


# ---- supervision ----------------------------------------------------------------------------------


def supervise_run(run_id: int) -> str:
    """Run (or refuse to re-run) run ``run_id`` to its end; returns what happened, for the task log."""
    host, pid = socket.gethostname(), os.getpid()
    try:
        run = Run.objects.get(pk=run_id)
    except Run.DoesNotExist:
        return f"run {run_id} does not exist"
    if run.status in SUPERVISED_STATUSES:
        if supervisor_is_alive(run) and not (run.worker_host == host and run.worker_pid == pid):
            return f"run {run_id} is already supervised by {run.worker_host}:{run.worker_pid}"
        return adopt_lost_run(run, host=host, pid=pid)
    if not run.claim(host=host, pid=pid):
        return f"run {run_id} is {run.status}; nothing to do"
    services.notify_status(run)
    follower = EventFollower(run.path / "events.jsonl", offset=run.events_offset, seq=run.events_seq)
    # Lines a previous trainer wrote after its supervisor died are recorded, but their `done` no longer decides.
    ingest_new_events(run, follower, apply_done=False)
    refused = launch_problem(run)
    if refused:  # found in seconds, before the trainer loads a model that could not be trained
        follower.close()
        services.finish_run(run, Run.Status.FAILED, refused)
        return f"run {run_id} refused: {refused}"
    try:
        proc = start_trainer(run, resume=run.resume_count > 0)
    except OSError as exc:
        services.finish_run(run, Run.Status.FAILED, f"could not start the trainer: {exc}")
        return f"run {run_id} failed to start"
    run.record_trainer(proc.pid)
    attempt = run.resume_count
    stopping = False
    try:
        return _follow(run, proc, follower, attempt)
    except SystemExit:  # the pool's SIGTERM handler: the worker is being stopped (a restart)
        stopping = True
        _stop_for_shutdown(run, proc, attempt)
        raise
    finally:
        follower.close()
        if proc.poll() is None and not stopping:  # the supervisor itself failed: no trainer left behind
            signal_group(proc.pid, signal.SIGTERM)
            _wait_recording(run, proc.poll, 60)
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            run.refresh_from_db()
            if run.resume_count == attempt:
                finish_lost_run(run, "the supervisor stopped unexpectedly; see the worker log")


def launch_problem(run: Run) -> str | None:
    """Why this worker cannot run ``run`` at all (its sandbox backend does not work here), or None."""
    from sandbox.backends import unavailable_reason

    sandbox = run.config.get("sandbox") if isinstance(run.config, dict) else None
    backend = sandbox.get("backend", "process") if isinstance(sandbox, dict) else "process"
    reason = unavailable_reason(str(backend))
    if reason is None:
        return None
    return f"sandbox.backend: {backend} is not available on worker {socket.gethostname()}: {reason}"


def _wait_recording(run: Run, exited, timeout_s: float) -> None:
    """Record the trainer's lines until ``exited()`` says it is gone (or ``timeout_s`` passes).

    A fresh follower from the stored offset: lines an interrupted follower had read but not yet
    stored are read again (storing is idempotent by line number). ``done`` decides nothing here.
    """
    run.refresh_from_db(fields=["events_offset", "events_seq"])
    follower = EventFollower(run.path / "events.jsonl", offset=run.events_offset, seq=run.events_seq)
    deadline = time.monotonic() + timeout_s
    last_beat = 0.0
    try:
        while exited() is None and time.monotonic() < deadline:
            ingest_new_events(run, follower, apply_done=False)
            if time.monotonic() - last_beat >= DB_CHECK_S:
                last_beat = time.monotonic()
                run.beat()
            time.sleep(POLL_S)
        ingest_new_events(run, follower, apply_done=False)
    finally:
        follower.close()


def _stop_for_shutdown(run: Run, proc: subprocess.Popen, attempt: int) -> None:
    """The worker is being stopped: the trainer checkpoints and exits, the run resumes by itself later.

    The flag is set first, so that a supervisor killed before its trainer is done still leaves a run
    that the next sweep resumes. A trainer still saving after ``SHUTDOWN_WAIT_S`` is left to finish
    (its checkpoint is worth more than a prompt exit); the next sweep records its last lines.
    """
    run.stop_for_shutdown(attempt)
    signal_group(proc.pid, signal.SIGTERM)
    _wait_recording(run, proc.poll, SHUTDOWN_WAIT_S)
    run.refresh_from_db()
    if proc.poll() is not None and run.resume_count == attempt:
        finish_lost_run(run, "the gpu worker supervising this run was stopped")


def _follow(run: Run, proc: subprocess.Popen, follower: EventFollower, attempt: int) -> str:
    """Follow the trainer to its end. Cancel: SIGTERM, so that a training trainer checkpoints its last
    step; a trainer that has not finished a step yet (loading a model, waiting on the hub, starting an
    engine, the first evaluation) has nothing to save and may be deaf to signals inside those calls,
    so it is killed after ``STARTUP_CANCEL_GRACE_S`` and the run ends ``cancelled`` at once."""
    seen: set = set()

    def on_lines(lines) -> None:
        for seq, event, offset in lines:
            services.ingest_event(run, event, seq=seq, offset=offset)
            seen.add(event.get("event"))

    def check() -> float | None:
        status = run.beat()
        if status == Run.Status.CANCELLING or status is None:  # cancelled, or the run was deleted
            starting = "step" not in seen and "done" not in seen
            return STARTUP_CANCEL_GRACE_S if starting else CANCEL_GRACE_S
        return None

    rc = follow_child(proc, follower, on_lines=on_lines, check=check, poll_s=POLL_S, check_s=DB_CHECK_S)
    done_seen, stepped = "done" in seen, "step" in seen
    run.refresh_from_db()
    if run.resume_count != attempt:
        # The trainer's `done` finished the run and the user resumed it before this trainer process
        # had exited: the run now belongs to the new attempt, whose verdict this one must not touch.
        return f"run {run.pk} was resumed while its previous trainer exited; left to the new attempt"
    if done_seen and run.is_finished:
        return f"run {run.pk} {run.status}"
    if run.status == Run.Status.CANCELLING:
        services.finish_run(run, Run.Status.CANCELLED, f"the trainer stopped without its final record (exit code {rc})"
                            if stepped else "cancelled while the trainer was starting (before its first step)")
    else:
        tail = stderr_tail(run)
        services.finish_run(run, Run.Status.FAILED, f"the trainer exited ({exit_text(rc)}) before finishing"
                            + (f":\n{tail}" if tail else ""))
    return f"run {run.pk} {run.status}"


def supervisor_is_alive(run: Run) -> bool:
    """Whether the run's supervisor may still be at work (same host: its pid; elsewhere: its heartbeat)."""
    return run.worker_is_alive()


def trainer_may_be_running(run: Run) -> bool:
    """Whether the trainer of a run whose supervisor is gone may still write events.jsonl.

    On the supervisor's host its recorded pid tells; elsewhere the file having changed within
    ``STALE_AFTER`` does (a trainer saving a checkpoint, or one still training, writes its lines then).
    """
    if run.worker_host == socket.gethostname():
        return run.is_trainer()
    try:
        return time.time() - (run.path / "events.jsonl").stat().st_mtime < STALE_AFTER.total_seconds()
    except OSError:
        return False


def catch_up(run: Run) -> None:
    """Record the lines of events.jsonl not stored yet; their ``done`` decides nothing here."""
    if not run.run_dir:
        return
    follower = EventFollower(run.path / "events.jsonl", offset=run.events_offset, seq=run.events_seq)
    try:
        ingest_new_events(run, follower, apply_done=False)
    finally:
        follower.close()


def attempt_done(run: Run) -> dict | None:
    """The ``done`` the current attempt's trainer wrote (after its ``start``), as stored; None if none."""
    start = run.events.filter(kind="start").order_by("-seq").values_list("seq", flat=True).first()
    done = run.events.filter(kind="done", seq__gt=-1 if start is None else start).order_by("-seq").first()
    return done.payload if done else None


def finish_lost_run(run: Run, reason: str) -> bool:
    """The verdict on a run whose supervisor is gone, once its trainer's lines are recorded.

    A ``done`` that says succeeded or failed is the trainer's own verdict; a cancel the user asked
    for is cancelled; otherwise (the trainer stopped because its supervisor did) the run failed,
    unless a worker shutdown stopped it, which resumes it later. The message names the checkpoint
    a resume continues from.
    """
    done = attempt_done(run)
    run.refresh_from_db()
    if done and done.get("status") in (Run.Status.SUCCEEDED, Run.Status.FAILED):  # the trainer's verdict
        return services.finish_run(run, done["status"], str(done.get("error") or ""))
    if run.status == Run.Status.CANCELLING:
        return services.finish_run(run, Run.Status.CANCELLED, "")
    checkpoint = run.checkpoints.order_by("-step").first()
    saved = f"its last checkpoint is step {checkpoint.step}" if checkpoint else "it saved no checkpoint"
    if run.auto_resume:
        return services.finish_run(run, Run.Status.FAILED, f"{reason}; {saved}. The run resumes automatically "
                                                           "from there when a gpu worker is back.")
    tail = stderr_tail(run) if run.run_dir else ""
    return services.finish_run(run, Run.Status.FAILED, f"{reason}; {saved}, and resume continues from there"
                               + (f"\nlast trainer stderr:\n{tail}" if tail else ""))


def settle_lost_run(run: Run, reason: str) -> bool | None:
    """Record what the trainer of a run whose supervisor is gone wrote, then give the run its verdict.

    Returns None, deciding nothing, while the trainer may still be writing (it got SIGTERM with its
    supervisor and is saving a checkpoint); a trainer orphaned and silent for ``CANCEL_GRACE_S`` is
    killed instead (on this host). Otherwise whether the run's status changed.
    """
    catch_up(run)
    if trainer_may_be_running(run):
        silent = run.heartbeat is None or timezone.now() - run.heartbeat > timedelta(seconds=CANCEL_GRACE_S)
        if not (silent and run.worker_host == socket.gethostname()):
            return None
        signal_group(run.trainer_pid, signal.SIGKILL)
        reason += f"; its trainer ({run.trainer_pid}) stopped writing for {CANCEL_GRACE_S} s and was killed"
    catch_up(run)  # the lines written between the first catch-up and the trainer's exit
    return finish_lost_run(run, reason)


def adopt_lost_run(run: Run, *, host: str, pid: int) -> str:
    """A task redelivered because its worker died: follow the orphaned trainer to its end, then settle.

    The trainer got SIGTERM with the dead supervisor and is saving its checkpoint; on the same host
    this task becomes its supervisor (heartbeat included) until it exits. A trainer on another host
    is left to the lost-run sweep.
    """
    reason = f"the worker supervising this run ({run.worker_label}) died"
    if run.worker_host == host and run.is_trainer():
        if not run.take_over(pid=pid):
            return f"run {run.pk} was taken over by another supervisor"
        trainer_pid = run.trainer_pid
        _wait_recording(run, lambda: None if run.is_trainer(trainer_pid) else True, CANCEL_GRACE_S)
        if run.is_trainer(trainer_pid):
            signal_group(trainer_pid, signal.SIGKILL)
            reason += f"; its trainer did not stop within {CANCEL_GRACE_S} s and was killed"
    outcome = settle_lost_run(run, reason)
    if outcome is None:
        return f"run {run.pk} lost its worker; its trainer on {run.worker_host} is still writing (left to the sweep)"
    run.refresh_from_db()
    return f"run {run.pk} lost its worker; its last lines are recorded and it is {run.status}"


def fail_lost_runs() -> list[int]:
    """Runs whose supervisor died (worker restart, host loss): their trainers' last lines recorded, then
    their verdict (see ``settle_lost_run``); then the runs a shutdown stopped are resumed. Returns the
    ids of the runs given a verdict."""
    return [run.pk for run in Run.lost()
            if settle_lost_run(run, f"the worker supervising this run ({run.worker_label}) died")]


def resume_interrupted_runs() -> list[int]:
    """Resume the runs a gpu worker shutdown stopped (called when a gpu worker starts); their ids. They go back
    in line in the order they were queued before (``queued``), not newest first."""
    resumed = []
    for run in Run.objects.filter(status=Run.Status.FAILED, auto_resume=True).order_by("queued", "pk"):
        try:
            services.resume_run(run, automatic=True)
        except TransitionError:  # resumed by hand (or by another worker) meanwhile
            continue
        resumed.append(run.pk)
    return resumed
