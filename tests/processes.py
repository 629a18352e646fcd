"""Service processes that tests start (Celery workers, daphne, redis-server): started in a session of
their own that dies with pytest, waited for on their port, stopped with their whole process group."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_pytest() -> None:
    """preexec_fn: the child gets SIGTERM if this pytest process dies (a killed run leaves no worker)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    """``args`` run from the checkout's root in a new session, output appended to ``log``."""
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_pytest)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group, 15 s to end, then SIGKILL to whatever of the group is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    """Until something listens on 127.0.0.1:``port``; a RuntimeError with ``log``'s tail if ``proc``
    exits first or nothing listens within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited: {log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}: {log.read_text()[-3000:]}")
