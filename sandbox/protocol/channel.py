"""What a worker channel offers: the transport between the host and one sandboxed worker.

Every backend starts the same in-sandbox worker (sandbox/harness.py) somewhere isolated and gives the
host a `Channel` to it; `sandbox.protocol.driver` runs each execution over that channel. A backend
implements `Channel` (how its worker is started, signalled and read), nothing of the protocol.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass
from typing import Callable

from ..limits import Limits


class WorkerBroken(Exception):
    """The worker did not behave (died, hung, answered garbage); it must be recycled."""


@dataclass
class ExecIO:
    """Host ends of one execution's pipes."""

    stdout: int
    stderr: int
    rpc_to_child: int | None = None
    rpc_from_child: int | None = None


@dataclass
class Done:
    """The worker's (trusted) report on how the child ended."""

    ended_by: str = "exit"
    exit_code: int | None = None
    signal: int | None = None
    cpu_s: float = 0.0
    maxrss_kb: int = 0
    wiped: int = 0


class FrameReader:
    """Length-prefixed JSON frames (4-byte big-endian size, then the body) read from a worker's socket.

    Shared by every backend: the worker side (sandbox/harness.py) writes the same framing.
    """

    def __init__(self, sock: socket.socket, who: str = "worker"):
        self.sock = sock
        self.who = who
        self._buf = b""

    def take(self) -> dict | None:
        """The next complete frame already received, or None."""
        if len(self._buf) >= 4:
            n = int.from_bytes(self._buf[:4], "big")
            if len(self._buf) >= 4 + n:
                body, self._buf = self._buf[4:4 + n], self._buf[4 + n:]
                return json.loads(body)
        return None

    def feed(self, exited: Callable[[], str] | None = None) -> None:
        """Read what the socket has (call when it is readable); WorkerBroken when the worker is gone."""
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            detail = exited() if exited else ""
            raise WorkerBroken(f"{self.who} exited" + (f": {detail}" if detail else ""))
        self._buf += chunk

    def recv(self, timeout: float, exited: Callable[[], str] | None = None) -> dict:
        """The next frame, waiting at most ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while True:
            frame = self.take()
            if frame is not None:
                return frame
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise WorkerBroken(f"{self.who} did not answer in {timeout:g} s")
            self.feed(exited)


class Channel:
    """The host's handle on one started worker (process or container)."""

    isolation = "none"
    features: list[str] = []
    executions = 0
    """Executions started on this worker."""
    anomaly: str | None = None
    """Something odd the last execution left (stray processes, a flooded scratch): the worker is
    recycled, and the execution's detail says so."""

    def alive(self) -> bool:
        raise NotImplementedError

    def start_execution(self, mode: str, code: str | None, stdin_data: bytes, limits: Limits) -> ExecIO:
        raise NotImplementedError

    def end_execution(self, how: str = "end") -> None:
        """Ask the worker to kill the execution now (`end` = finished normally, `kill` = deadline)."""
        raise NotImplementedError

    def ctrl_fd(self) -> int:
        raise NotImplementedError

    def poll_done(self) -> Done | None:
        """Read from the control channel (readable); the Done report once complete."""
        raise NotImplementedError

    def wait_done(self, timeout: float) -> Done:
        raise NotImplementedError

    def memory_report(self) -> tuple[float, bool]:
        """(peak MB of the execution, whether the memory limit was hit) from the cgroup, if any."""
        return 0.0, False

    def before_execution(self, limits: Limits) -> None:
        pass

    def close(self) -> None:
        pass
