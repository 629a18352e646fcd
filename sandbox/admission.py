"""Who may hold a connection of the sandbox service, and for how long (docs/design.md "Sandbox service").

A connection is *unauthenticated* from the moment it is accepted until its request presents the
token; only then does it take one of the work slots (``max_work``: 503 beyond), so sockets without
the token can never hold the slots batches run in. Unauthenticated connections (still sending their
request line and headers, or being answered without the token: /healthz, 401, 404) are bounded:

- in all (``max_unauthenticated``) and per peer address (``max_per_peer``). A new connection past
  either bound cuts the *oldest* unauthenticated one of its peer (or of all) rather than being
  refused: a client that sends its headers at once always gets in, however many slow sockets sit
  there, and one address can only ever push out its own sockets while the pool is not full.
- in time: each has ``timeout_s`` to be authenticated, scaled down by the pressure on the pool
  (the larger of the share of the pool and of its peer's ``max_per_peer`` the others hold) to
  ``MIN_SHARE`` of it at the least. A reaper thread cuts the ones past their deadline.

An authenticated body has ``body_timeout_s``, scaled down by the share of work slots the other
requests hold, to ``MIN_SHARE`` of it. A cut is ``shutdown(SHUT_RDWR)`` of the socket: the handler's
blocked read returns and its thread ends.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

MIN_SHARE = 0.1
"""The least share of a deadline left under full pressure."""
REAP_INTERVAL_S = 0.1
"""How often the reaper looks for connections past their deadline."""


@dataclass(eq=False)
class Ticket:
    """One accepted connection's standing."""

    sock: socket.socket
    peer: str
    since: float
    authenticated: bool = False
    working: bool = False
    """Holds a work slot."""
    cut: bool = field(default=False, repr=False)


class Admission:
    """The bounds above for one server; every method is thread-safe."""

    def __init__(self, *, max_work: int, max_unauthenticated: int, max_per_peer: int, timeout_s: float,
                 body_timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_work, self.max_unauthenticated, self.max_per_peer = max_work, max_unauthenticated, max_per_peer
        self.timeout_s, self.body_timeout_s = timeout_s, body_timeout_s
        self.clock = clock
        self.lock = threading.Lock()
        self.tickets: dict[socket.socket, Ticket] = {}
        """Every open connection's."""
        self.waiting: dict[socket.socket, Ticket] = {}
        """Unauthenticated connections, oldest first (dicts keep insertion order)."""
        self.per_peer: Counter = Counter()
        self.working = 0
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    # -- a connection's life ------------------------------------------------------------------
    def admit(self, sock: socket.socket, peer: str) -> Ticket:
        """Register a new connection, first cutting the oldest of its peer's (or of all) when a bound is hit."""
        ticket = Ticket(sock, peer, self.clock())
        with self.lock:
            if self.per_peer[peer] >= self.max_per_peer:
                self._cut(next(t for t in self.waiting.values() if t.peer == peer))
            if len(self.waiting) >= self.max_unauthenticated:
                self._cut(next(iter(self.waiting.values())))
            self.tickets[sock] = self.waiting[sock] = ticket
            self.per_peer[peer] += 1
        return ticket

    def ticket(self, sock: socket.socket) -> Ticket:
        with self.lock:
            return self.tickets[sock]

    def authenticate(self, ticket: Ticket) -> bool:
        """The connection presented the token: it leaves the unauthenticated pool and takes a work
        slot. False when every slot is held (answer 503)."""
        with self.lock:
            if ticket.cut:
                return False
            self._leave(ticket)
            ticket.authenticated = True
            if self.working >= self.max_work:
                return False
            self.working += 1
            ticket.working = True
            return True

    def release(self, ticket: Ticket) -> None:
        """The connection is done: whatever it held is free."""
        with self.lock:
            self._leave(ticket)
            self.tickets.pop(ticket.sock, None)
            if ticket.working:
                ticket.working = False
                self.working -= 1

    # -- deadlines ------------------------------------------------------------------------------
    def deadline_s(self, peer: str) -> float:
        """How long an unauthenticated connection of ``peer`` may stay, at the pressure of now."""
        with self.lock:
            return self._deadline_s(peer)

    def body_deadline_s(self) -> float:
        """How long an authenticated request (holding a slot) may take to send its body, at the pressure of now."""
        with self.lock:
            others = max(0, self.working - 1)
        return self.body_timeout_s * max(MIN_SHARE, 1 - others / self.max_work)

    def reap(self) -> int:
        """Cut the unauthenticated connections past their deadline; how many were cut."""
        now = self.clock()
        with self.lock:
            late = [t for t in self.waiting.values() if now - t.since > self._deadline_s(t.peer)]
            for t in late:
                self._cut(t)
        return len(late)

    def start(self) -> None:
        self._reaper = threading.Thread(target=self._reap_loop, name="admission-reaper", daemon=True)
        self._reaper.start()

    def stop(self) -> None:
        self._stop.set()

    def counts(self) -> dict:
        with self.lock:
            return {"unauthenticated": len(self.waiting), "working": self.working}

    # -- under the lock -------------------------------------------------------------------------
    def _deadline_s(self, peer: str) -> float:
        # The others' share: a lone connection has the whole timeout.
        pressure = max((len(self.waiting) - 1) / self.max_unauthenticated,
                       (self.per_peer[peer] - 1) / self.max_per_peer)
        return self.timeout_s * max(MIN_SHARE, 1 - pressure)

    def _leave(self, ticket: Ticket) -> None:
        if self.waiting.pop(ticket.sock, None) is not None:
            self.per_peer[ticket.peer] -= 1
            if not self.per_peer[ticket.peer]:
                del self.per_peer[ticket.peer]

    def _cut(self, ticket: Ticket) -> None:
        self._leave(ticket)
        ticket.cut = True
        try:
            ticket.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _reap_loop(self) -> None:
        while not self._stop.wait(REAP_INTERVAL_S):
            self.reap()
