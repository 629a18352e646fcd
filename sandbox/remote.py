"""`RemoteRunner`: the `Runner` interface over `python -m sandbox serve` replicas (sandbox/service.py).

A batch is cut into chunks that the replicas pull from one queue: each replica keeps
`requests_per_endpoint` requests in flight, each of `chunk_per_slot` x its free capacity candidates
(free capacity: its `workers - busy` at the start of the batch, at least one), so candidates spread
over the replicas in proportion to their free capacity and a faster replica simply pulls more chunks.
Results stream back as JSON lines; a replica whose connection breaks or stays silent past
`idle_timeout_s` (it sends heartbeats) is dropped for the rest of the batch and the candidates of its
chunks that have no result go back on the queue for the others (verdicts are deterministic, so a
re-run changes nothing); one at its connection limit (503) is asked again after a pause. Every candidate
gets exactly one result. Only when no replica is left does the batch fail, with `RemoteUnavailable`
naming every endpoint and what happened to it. Each batch probes every endpoint again, so a replica
that comes back is used again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlsplit

from .result import ExecutionResult
from .runner import BatchRunner, Candidate, Runner, _problem_map

TOKEN_ENV = "CRUCIBLE_SANDBOX_TOKEN"
"""The environment variable holding the shared token (never a command-line argument: `ps` shows those)."""
RUN_BATCH_PATH = "/v1/run-batch"
HEALTH_PATH = "/healthz"


class RemoteUnavailable(RuntimeError):
    """No sandbox endpoint is left to run a batch; the message names each one and why."""


@dataclass
class Endpoint:
    """One replica as this client sees it."""

    url: str
    """Base URL requests go to, e.g. http://10.0.0.5:8700."""
    name: str = ""
    """The configured URL it came from (a name such as http://sandbox:8700 gives one Endpoint per address)."""
    workers: int = 0
    """Its parallel executions (from /healthz)."""
    free: int = 0
    """Its free capacity at the start of the batch (`workers - busy`, at least 1)."""
    error: str | None = None
    """Why it was dropped from the batch (None while usable)."""
    lanes: int = 0
    """Its request loops still running in this batch."""

    @property
    def label(self) -> str:
        return self.url if self.name in ("", self.url) else f"{self.name} at {self.url}"


def expand_endpoint(url: str) -> list[Endpoint]:
    """One Endpoint per address of an http URL's host name (the replicas behind one DNS name, as
    `docker compose --scale` and Kubernetes headless services publish them); an IP address, or https
    (whose certificate names the host), stays one Endpoint."""
    import ipaddress
    import socket
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
        return [Endpoint(url, url)]
    except ValueError:
        pass
    if parts.scheme != "http":
        return [Endpoint(url, url)]
    try:
        infos = socket.getaddrinfo(host, parts.port or 80, type=socket.SOCK_STREAM)
    except OSError as e:
        return [Endpoint(url, url, error=f"cannot resolve {host}: {e}")]
    # One family (IPv4 when there is any): `localhost` as 127.0.0.1 and ::1 is one server, not two.
    v4 = [info for info in infos if info[0] == socket.AF_INET]
    addresses = list(dict.fromkeys(info[4][0] for info in (v4 or infos)))
    if len(addresses) <= 1:
        return [Endpoint(url, url)]
    port = f":{parts.port}" if parts.port else ""
    return [Endpoint(f"http://{f'[{a}]' if ':' in a else a}{port}{parts.path}", url) for a in addresses]


def check_endpoint_url(url: str) -> str:
    """`url` without a trailing slash if it is an http(s) URL with a host; ValueError saying how to fix it."""
    if not isinstance(url, str):
        raise ValueError(f"endpoint {url!r}: must be a URL string such as http://127.0.0.1:8700")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint {url!r}: must be an http:// or https:// URL with a host, "
                         "e.g. http://127.0.0.1:8700")
    if parts.query or parts.fragment or parts.username:
        raise ValueError(f"endpoint {url!r}: give scheme, host, port (and a path prefix) only; "
                         f"the token comes from {TOKEN_ENV}")
    try:
        parts.port
    except ValueError as e:
        raise ValueError(f"endpoint {url!r}: {e}") from None
    return url.strip().rstrip("/")


def _errors() -> tuple:
    """What a broken or lying replica raises here (connection, protocol, bad JSON or fields)."""
    import http.client
    return (OSError, ValueError, KeyError, TypeError, http.client.HTTPException)


class _Connection:
    """One HTTP exchange with an endpoint (http.client, a new connection per request)."""

    def __init__(self, url: str, timeout_s: float):
        import http.client  # here, not at import: `sandbox` CLI calls that never reach a replica stay fast
        parts = urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.prefix = parts.path.rstrip("/")
        self.conn = cls(parts.hostname, parts.port, timeout=timeout_s)

    def request(self, method: str, path: str, body: bytes | None, token: str):
        headers = {"Authorization": f"Bearer {token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, self.prefix + path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the replica answered before reading the whole body (401, 413, 503): read that answer
        return self.conn.getresponse()

    def close(self) -> None:
        self.conn.close()


class _Batch:
    """The shared state of one submitted batch: the queue of unassigned candidates and the results."""

    def __init__(self, problems: dict, candidates: Sequence[Candidate], endpoints: list[Endpoint]):
        self.problems = problems
        self.candidates = list(candidates)
        self.results: list[ExecutionResult | None] = [None] * len(self.candidates)
        self.left = len(self.candidates)
        self.pending: deque[int] = deque(range(len(self.candidates)))
        self.endpoints = endpoints
        self.in_flight = 0
        self.alive = 0
        self.received = 0
        """Results that arrived (a re-run candidate's second result counts; `duplicates` says how many)."""
        self.duplicates = 0
        self.requeued = 0
        """Candidates put back on the queue because their replica was lost."""
        self.cv = threading.Condition()
        self.future: Future = Future()
        self.future.set_running_or_notify_cancel()

    def take(self, size: int) -> list[int] | None:
        """The next chunk of at most `size` candidates; waits while others' chunks may still come
        back; None once every candidate has a result (or the batch has failed)."""
        with self.cv:
            while not self.pending:
                if self.left == 0 or self.future.done() or self.in_flight == 0:
                    return None
                self.cv.wait()
            chunk = [self.pending.popleft() for _ in range(min(size, len(self.pending)))]
            self.in_flight += 1
            return chunk

    def record(self, i: int, result: ExecutionResult) -> None:
        with self.cv:
            self.received += 1
            if self.results[i] is not None:
                self.duplicates += 1
                return  # a re-run of a candidate that already had its result
            self.results[i] = result
            self.left -= 1
            if self.left == 0:
                self.cv.notify_all()
                self.future.set_result(self.results)

    def give_back(self, chunk: list[int]) -> None:
        """The chunk's request is over: its candidates without a result go back on the queue."""
        with self.cv:
            self.in_flight -= 1
            missing = [i for i in chunk if self.results[i] is None]
            self.requeued += len(missing)
            self.pending.extendleft(reversed(missing))
            self.cv.notify_all()

    def endpoint_lost(self) -> None:
        with self.cv:
            self.alive -= 1
            if self.alive == 0 and self.left and not self.future.done():
                self.future.set_exception(RemoteUnavailable(_none_left(self.endpoints, self.left,
                                                                       len(self.candidates))))
            self.cv.notify_all()


def _wire(problem) -> dict:
    """A problem's native form as a batch sends it: without `excluded`."""
    d = problem.to_dict()
    d.pop("excluded", None)
    return d


def _none_left(endpoints: list[Endpoint], left: int, total: int) -> str:
    what = "; ".join(f"{e.label} ({e.error or 'gone'})" for e in endpoints)
    return (f"no sandbox endpoint is left: {what}; {left} of {total} candidates have no result. "
            f"Start the replicas (`python -m sandbox serve`, with the same {TOKEN_ENV}) or set "
            "sandbox.endpoints: [] to run on the local pool")


class RemoteRunner:
    """Runs batches on sandbox service replicas; the same calls as `sandbox.Runner`."""

    def __init__(self, endpoints: Sequence[str], token: str | None = None, *, timeout_s: float | None = None,
                 memory_mb: int | None = None, requests_per_endpoint: int = 2, idle_timeout_s: float = 30.0,
                 chunk_per_slot: int = 8, max_chunk: int = 256):
        if not endpoints:
            raise ValueError("RemoteRunner needs at least one endpoint URL (empty: use sandbox.Runner)")
        self.urls = [check_endpoint_url(u) for u in endpoints]
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        if not self.token:
            raise ValueError(f"{TOKEN_ENV} is not set: the sandbox endpoints {', '.join(self.urls)} need "
                             "the token their replicas were started with")
        if timeout_s is not None or memory_mb is not None:
            from .runner import _check_overrides
            _check_overrides(timeout_s, memory_mb)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.requests_per_endpoint = max(1, requests_per_endpoint)
        self.idle_timeout_s = idle_timeout_s
        self.chunk_per_slot = max(1, chunk_per_slot)
        self.max_chunk = max(1, max_chunk)
        self.mode = "remote"
        self.backend = "remote"
        self._closed = False
        self._workers = 0
        self.last_batch: _Batch | None = None
        """The latest batch (its `received`, `duplicates` and `requeued` counts), for diagnostics."""
        self.last_endpoints: list[Endpoint] = []
        """The endpoints of the latest batch as it saw them (capacity, and why one was dropped)."""

    # -- the Runner interface -------------------------------------------------------------------
    @property
    def workers(self) -> int:
        """Parallel executions of the replicas that answered the last probe."""
        return self._workers

    @property
    def isolation(self) -> str:
        return "remote"

    def run_one(self, problem, candidate: Candidate | None = None, *, code: str | None = None) -> ExecutionResult:
        cand = candidate or Candidate(problem_id=problem.id, code=code)
        return self.run_batch({problem.id: problem}, [cand])[0]

    def run_batch(self, problems, candidates: Sequence[Candidate]) -> list[ExecutionResult]:
        """Results in the same order as `candidates`."""
        return self.submit_batch(problems, candidates).result()

    def submit_batch(self, problems, candidates: Sequence[Candidate]) -> Future:
        """Start a batch and return at once; the Future holds the list of results (or RemoteUnavailable)."""
        if self._closed:
            raise RuntimeError("RemoteRunner is closed")
        pmap = _problem_map(problems)
        batch = _Batch(pmap, candidates, [Endpoint(u, u) for u in self.urls])
        self.last_batch = batch
        if not batch.candidates:
            batch.future.set_result([])
            return batch.future
        unknown = [c.problem_id for c in batch.candidates if c.problem_id not in pmap]
        if unknown:
            batch.future.set_exception(ValueError(f"candidates name problem_id {unknown[0]!r}, which is not "
                                                  "among the batch's problems"))
            return batch.future
        threading.Thread(target=self._start, args=(batch,), daemon=True, name="sandbox-remote").start()
        return batch.future

    def close(self) -> None:
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals ------------------------------------------------------------------------------
    def _start(self, batch: _Batch) -> None:
        try:
            self._dispatch(batch)
        except BaseException as e:  # never leave the Future unset
            if not batch.future.done():
                batch.future.set_exception(e)

    def _dispatch(self, batch: _Batch) -> None:
        batch.endpoints = [e for url in self.urls for e in expand_endpoint(url)]
        self.last_endpoints = batch.endpoints
        probes = [threading.Thread(target=self._probe, args=(e,), daemon=True) for e in batch.endpoints
                  if e.error is None]
        for t in probes:
            t.start()
        for t in probes:
            t.join()
        usable = [e for e in batch.endpoints if e.error is None]
        self._workers = sum(e.workers for e in usable)
        with batch.cv:
            batch.alive = len(usable)
        if not usable:
            batch.future.set_exception(RemoteUnavailable(_none_left(batch.endpoints, batch.left,
                                                                    len(batch.candidates))))
            return
        for e in usable:
            e.lanes = self.requests_per_endpoint
            for k in range(self.requests_per_endpoint):
                threading.Thread(target=self._lane, args=(batch, e), daemon=True,
                                 name=f"sandbox-remote-{k}").start()

    def _probe(self, e: Endpoint) -> None:
        conn = _Connection(e.url, min(self.idle_timeout_s, 10.0))
        try:
            resp = conn.request("GET", HEALTH_PATH, None, self.token)
            health = json.loads(resp.read())
            if resp.status != 200 or not health.get("ok"):
                raise ValueError(f"/healthz answered {resp.status} {health!r}")
            e.workers = int(health["workers"])
            e.free = max(1, e.workers - int(health.get("busy", 0)))
        except _errors() as err:
            e.error = f"/healthz: {type(err).__name__}: {err}"[:300]
        finally:
            conn.close()

    def _lane(self, batch: _Batch, e: Endpoint) -> None:
        """One request at a time to `e`, until the batch is done or `e` fails."""
        size = min(self.max_chunk, e.free * self.chunk_per_slot)
        refused = 0  # 503s in a row: the replica is at its connection limit, not dead
        while e.error is None:
            chunk = batch.take(size)
            if chunk is None:
                return
            try:
                self._run_chunk(batch, e, chunk)
                refused = 0
            except _ReplicaBusy as busy:
                refused += 1
                if refused > MAX_REFUSALS:
                    with batch.cv:
                        e.error = e.error or f"{busy} ({refused} times in a row)"
            except _ReplicaLost as lost:
                with batch.cv:
                    e.error = e.error or str(lost)
            finally:
                batch.give_back(chunk)
            if refused and e.error is None:
                time.sleep(min(2.0, 0.05 * 2 ** refused))  # meanwhile the chunk is free for the others
        with batch.cv:
            e.lanes -= 1
            last_lane = e.lanes == 0
        if last_lane:
            batch.endpoint_lost()

    def _run_chunk(self, batch: _Batch, e: Endpoint, chunk: list[int]) -> None:
        cands = [batch.candidates[i] for i in chunk]
        needed = {c.problem_id for c in cands}
        # Under the batch's own keys, which callers may choose apart from the problems' ids. `excluded` (what runs
        # skip) changes no execution and stays off the wire, so a replica from before the field takes the batch.
        body = json.dumps({"problems": [{**_wire(batch.problems[pid]), "id": pid} for pid in needed],
                           "candidates": [c.to_dict() for c in cands],
                           "timeout_s": self.timeout_s, "memory_mb": self.memory_mb}).encode()
        conn = _Connection(e.url, self.idle_timeout_s)
        got = 0
        try:
            resp = conn.request("POST", RUN_BATCH_PATH, body, self.token)
            if resp.status == 503:
                raise _ReplicaBusy(f"run-batch answered 503: {resp.read(500).decode(errors='replace').strip()}")
            if resp.status != 200:
                raise _ReplicaLost(f"run-batch answered {resp.status}: "
                                  f"{resp.read(500).decode(errors='replace').strip()}")
            for raw in resp:
                if not raw.strip():
                    continue  # heartbeat
                line = json.loads(raw)
                if "summary" in line:
                    break
                if "error" in line:
                    raise _ReplicaLost(f"the replica broke: {line['error']}")
                k = int(line.pop("candidate_index"))
                line.pop("problem_id", None)
                batch.record(chunk[k], ExecutionResult.from_dict(line))
                got += 1
            if got != len(chunk):
                raise _ReplicaLost(f"the stream ended after {got} of {len(chunk)} results")
        except _errors() as err:
            raise _ReplicaLost(f"{type(err).__name__}: {err}"[:300] + f" after {got} of {len(chunk)} results") \
                from None
        finally:
            conn.close()


class _ReplicaLost(Exception):
    """A request to a replica failed; the replica is dropped for the rest of the batch."""


class _ReplicaBusy(Exception):
    """The replica refused a request at its connection limit (503): tried again after a pause."""


MAX_REFUSALS = 20
"""503s in a row after which a replica counts as lost."""


ENDPOINTS_ENV = "CRUCIBLE_SANDBOX_ENDPOINTS"
"""Comma-separated replica URLs set by the operator of a worker: the endpoints of runs that name none,
and the only endpoints a run may name (so a run config from a web user cannot send the token elsewhere)."""


def operator_endpoints() -> list[str]:
    """The URLs of CRUCIBLE_SANDBOX_ENDPOINTS (empty when unset)."""
    raw = os.environ.get(ENDPOINTS_ENV, "")
    return [check_endpoint_url(u) for u in raw.split(",") if u.strip()]


def choose_endpoints(endpoints: Sequence[str]) -> list[str]:
    """The endpoints to run on: the given ones, which must be among CRUCIBLE_SANDBOX_ENDPOINTS when that
    is set, else CRUCIBLE_SANDBOX_ENDPOINTS; empty means the local pool."""
    allowed = operator_endpoints()
    given = [check_endpoint_url(u) for u in endpoints]
    if allowed:
        stray = [u for u in given if u not in allowed]
        if stray:
            raise ValueError(f"sandbox endpoint {stray[0]} is not one of this worker's {ENDPOINTS_ENV} "
                             f"({', '.join(allowed)}); name one of those or leave sandbox.endpoints empty")
    return given or allowed


def make_runner(*, endpoints: Sequence[str] = (), backend: str = "process", workers: int | None = None,
                mode: str = "warm", timeout_s: float | None = None, memory_mb: int | None = None) -> BatchRunner:
    """A `RemoteRunner` over `choose_endpoints(endpoints)` when there are any (token from
    CRUCIBLE_SANDBOX_TOKEN), else a local `Runner` pool."""
    chosen = choose_endpoints(endpoints)
    if chosen:
        return RemoteRunner(chosen, timeout_s=timeout_s, memory_mb=memory_mb)
    return Runner(backend=backend, workers=workers, mode=mode, timeout_s=timeout_s, memory_mb=memory_mb)
