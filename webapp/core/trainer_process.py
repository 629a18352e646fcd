"""The trainer's child process, as a web job starts, watches and stops it.

A run (``webapp.runs.supervisor``, ``python -m training run``) and a difficulty probe
(``webapp.probes.services``, ``python -m training probe``) are both a Celery task supervising the
training CLI as a child, and their rows are both a ``webapp.core.models.TrainerJob``: the child is
started in its own directory and session with PR_SET_PDEATHSIG (it gets SIGTERM when the worker process
dies instead of working on unsupervised), followed to its exit by ``follow_child`` through the JSON
Lines file it writes, stopped through its process group, and described by the tail of its stderr
when it fails (``exit_text`` + ``stderr_tail``). Whoever finds a job ``running`` asks ``worker_alive``
whether the worker that claimed it may still be at work, and ``is_child_of`` whether a recorded child
pid is still that child.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.utils import timezone

STALE_AFTER = timedelta(seconds=120)
"""A running job whose worker (on another host) has not beaten its heart for this long lost it."""
STDERR_TAIL_LINES = 20
"""How many lines of a failed child's stderr its job's error quotes."""
_STDERR_TAIL_BYTES = 16384
PROGRESS_LINE = re.compile(r"(step \d+/\d+|probe \d+/\d+ problems) \|")
"""The training CLI's progress lines (one per step of a run, one per problem of a probe)."""
_PR_SET_PDEATHSIG = 1


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


# ---- starting -----------------------------------------------------------------------------------


def die_with_parent(parent_pid: int):
    """A ``preexec_fn`` that has the child get SIGTERM when ``parent_pid`` (the worker) dies."""
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


def trainer_env(*, offline: bool = False) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # The trainer works in its job's dir (below), so the project must be importable from elsewhere.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(settings.BASE_DIR), os.environ.get("PYTHONPATH")) if p)
    if settings.HF_OFFLINE or offline:  # without a network the hub client would retry for about a minute first
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def spawn(command: list[str], *, cwd: Path, stdout, stderr, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``command`` in ``cwd``, in a session of its own (its group is what ``stop`` signals),
    dying with this process. ``cwd`` is the job's own directory: a hub id (org/name) that also named a
    directory relative to the trainer's working directory would be loaded from there."""
    return subprocess.Popen(command, cwd=cwd, env=trainer_env() if env is None else env, stdin=subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr, start_new_session=True,
                            preexec_fn=die_with_parent(os.getpid()))


# ---- watching -----------------------------------------------------------------------------------


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


def worker_alive(host: str, pid: int | None, heartbeat: datetime | None) -> bool:
    """Whether the worker ``host:pid`` that claimed a job may still be at work: on this host its pid
    tells; elsewhere its heartbeat, younger than ``STALE_AFTER``."""
    if host == socket.gethostname():
        return pid_alive(pid)
    return heartbeat is not None and timezone.now() - heartbeat < STALE_AFTER


def is_child_of(pid: int | None, marker: str) -> bool:
    """Whether process ``pid`` (on this host) is alive and its command line names ``marker`` (the job's
    config or output path): a pid the system gave to another process since is not the job's child."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline.split(b"\0")


def follow_child(proc: subprocess.Popen, follower: EventFollower, *, on_lines: Callable[[list], None],
                 check: Callable[[], float | None], poll_s: float, check_s: float) -> int:
    """Follow the child ``proc`` to its exit; its exit code.

    Every ``poll_s`` the new lines of ``follower`` go to ``on_lines`` (the lines written up to the exit
    included); every ``check_s`` ``check()`` (which beats the job's heart) says whether the child must
    stop: None to let it work, else the seconds it has between SIGTERM (sent once, to its group) and
    SIGKILL. ``check`` may change that grace as the child gets on (a trainer still loading its model has
    nothing to save).
    """
    last_check = float("-inf")
    term_sent: float | None = None
    grace: float | None = None
    while True:
        rc = proc.poll()
        on_lines(follower.read())
        if rc is not None:
            on_lines(follower.read())  # what it wrote between the read above and its exit
            return rc
        now = time.monotonic()
        if now - last_check >= check_s:
            last_check = now
            grace = check()
            if grace is not None and term_sent is None:
                signal_group(proc.pid, signal.SIGTERM)
                term_sent = now
        if term_sent is not None and grace is not None and now - term_sent > grace:
            signal_group(proc.pid, signal.SIGKILL)
        time.sleep(poll_s)


def exit_text(rc: int) -> str:
    """How a child ended, for a job's error: ``killed by signal N`` or ``exit code N``."""
    return f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` non-blank lines of a child's stderr log ("" when there is none), its progress
    lines but the last one left out: a trainer that was training wrote one per step, and twenty of
    them quoted a stale step first (``step 107/300`` for a run lost at step 126) and crowded out the
    lines that say what happened."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _STDERR_TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    # transformers' weight-loading bars are carriage-return updates: keep only what each line ended as
    kept = [line for line in (line.rsplit("\r", 1)[-1] for line in text.split("\n")) if line.strip()]
    progress = [i for i, line in enumerate(kept) if PROGRESS_LINE.match(line)]
    stale = set(progress[:-1])
    return "\n".join([line for i, line in enumerate(kept) if i not in stale][-lines:])


# ---- stopping -----------------------------------------------------------------------------------


def signal_group(pid: int | None, sig: int) -> None:
    """Send ``sig`` to the process group ``pid`` leads (a child from ``spawn`` leads its own); a group
    already gone is no error."""
    if not pid:
        return
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to ``proc``'s group, SIGKILL after ``grace_s``; returns once ``proc`` is reaped."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
