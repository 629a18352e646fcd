"""`python -m sandbox serve`: the sandbox as a stateless HTTP service (docs/design.md "Sandbox service
(sandbox/)").

    POST /v1/run-batch   {"problems": [native problem objects], "candidates": [{problem_id, code}],
                          "timeout_s": null, "memory_mb": null}
        -> 200, `application/x-ndjson`, chunked: one line per candidate *in candidate order*, each the
           result object `python -m sandbox run-batch` prints (with `problem_id` and
           `candidate_index`, the candidate's 0-based position in the request), then one
           `{"summary": {...}}` line. Blank lines are heartbeats (sent every `heartbeat_s` while no
           result is ready) and carry nothing. A line `{"error": "..."}` ends a stream that broke.
    GET /healthz         -> {"ok": true, "workers": N, "busy": B} (no token needed: it says nothing
                            about any batch; orchestrators probe it).

Every other request needs `Authorization: Bearer <CRUCIBLE_SANDBOX_TOKEN>` (compared in constant time)
and is refused (401) without it. Bounds: the body (`Content-Length` required, at most
`max_body_bytes`: 413; nested at most `max_json_depth` levels: 400), the candidates of one request
(`max_candidates`: 413), the authenticated requests served at once (`max_connections`: 503), the
connections without the token yet (`max_unauthenticated`, `max_unauthenticated_per_peer`: the oldest
is cut), and the time to send a request (`request_timeout_s`, `body_deadline_s`, both shrinking under
pressure: the connection is dropped); see `admission.py`. The server is the standard library's
threaded HTTP server behind those bounds: one thread per connection, every batch feeding one shared
`Runner` of `workers` slots.
"""

from __future__ import annotations

import hmac
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .admission import Admission, Ticket
from .boundedjson import JSONRefused, loads
from .remote import HEALTH_PATH, RUN_BATCH_PATH, TOKEN_ENV
from .runner import Candidate, Runner, summarize

@dataclass(frozen=True)
class ServiceConfig:
    """How one replica serves: where it listens, its capacity and its bounds."""

    token: str
    """Shared secret every run-batch request must present (from CRUCIBLE_SANDBOX_TOKEN)."""
    host: str = "127.0.0.1"
    """Address to bind; loopback unless told otherwise (0.0.0.0 to serve other machines)."""
    port: int = 8700
    """TCP port; 0 picks a free one (printed on the first stdout line)."""
    workers: int = 0
    """Parallel executions of this replica; 0 = the CPU count."""
    backend: str = "process"
    """Execution backend of the replica's Runner."""
    mode: str = "warm"
    """warm (reused isolated workers) or cold (a fresh sandbox per execution)."""
    max_body_bytes: int = 64 << 20
    """Largest request body accepted (413 beyond)."""
    max_candidates: int = 4096
    """Most candidates in one request (413 beyond); a client splits bigger batches."""
    max_connections: int = 64
    """Authenticated requests served at once (503 beyond); connections without the token never hold these."""
    max_unauthenticated: int = 64
    """Connections not yet authenticated held at once; a new one past this cuts the oldest."""
    max_unauthenticated_per_peer: int = 8
    """Of those, from one peer address; a new one past this cuts that peer's oldest."""
    max_json_depth: int = 32
    """Deepest nesting of arrays and objects in a body (400 beyond; a batch needs about 5)."""
    request_timeout_s: float = 30.0
    """Longest time from connecting to presenting the token (down to a tenth under pressure), and for each
    read and write."""
    body_deadline_s: float = 120.0
    """Longest time to receive a whole body (down to a tenth while the other requests hold the slots)."""
    heartbeat_s: float = 2.0
    """A blank line is sent after this long without a result, so clients can tell a slow batch from a dead one."""

    def __post_init__(self) -> None:
        if not self.token or not self.token.strip():
            raise ValueError(f"no token: set {TOKEN_ENV} to a shared secret, e.g. "
                             f"`export {TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))')`, "
                             f"and give clients the same value")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port}: must be in [0, 65535]")
        for name in ("max_body_bytes", "max_candidates", "max_connections", "max_unauthenticated",
                     "max_unauthenticated_per_peer", "max_json_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least 1")
        for name in ("request_timeout_s", "body_deadline_s", "heartbeat_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be a positive number of seconds")


class RequestRefused(Exception):
    """A request the service will not run; `status` is the HTTP status, the message says why."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Batch:
    """A validated run-batch request."""

    problems: dict
    """Problems by id."""
    candidates: list[Candidate]
    """In request order."""
    timeout_s: float | None = None
    """Time limit override for every candidate (null: each problem's own)."""
    memory_mb: int | None = None
    """Memory limit override for every candidate (null: each problem's own)."""


def parse_batch(body: bytes, max_candidates: int, max_depth: int = ServiceConfig.max_json_depth) -> Batch:
    """A run-batch body -> Batch; RequestRefused (400/413) naming the bad field or the bound otherwise."""
    from .problems import Problem, ProblemError
    try:
        obj = loads(body, max_depth=max_depth)
    except JSONRefused as e:
        if e.reason == "depth":
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"the body nests arrays and objects more than "
                                                         f"{max_depth} levels deep (this replica's limit, "
                                                         "--max-json-depth)") from None
        raise RequestRefused(HTTPStatus.BAD_REQUEST, f"the body {e}") from None
    if not isinstance(obj, dict):
        raise RequestRefused(HTTPStatus.BAD_REQUEST, "the body must be an object {problems, candidates}")
    unknown = sorted(set(obj) - {"problems", "candidates", "timeout_s", "memory_mb"})
    if unknown:
        raise RequestRefused(HTTPStatus.BAD_REQUEST, f"unknown field {unknown[0][:80]!r}; valid: problems, "
                                                     "candidates, timeout_s, memory_mb")
    raw_problems, raw_cands = obj.get("problems"), obj.get("candidates")
    if not isinstance(raw_problems, list) or not isinstance(raw_cands, list):
        raise RequestRefused(HTTPStatus.BAD_REQUEST, "problems and candidates must both be lists")
    if len(raw_cands) > max_candidates:
        raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             f"{len(raw_cands)} candidates; this replica takes at most {max_candidates} "
                             "per request: split the batch")
    problems: dict = {}
    for i, d in enumerate(raw_problems):
        try:
            p = Problem.from_dict(d)
        except ProblemError as e:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"problems[{i}]: {e}") from None
        if p.id in problems:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"problems[{i}]: id {p.id!r} appears twice")
        problems[p.id] = p
    cands = []
    for i, d in enumerate(raw_cands):
        try:
            cands.append(Candidate.from_dict(d, problems))
        except ValueError as e:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"candidates[{i}]: {e}") from None
    batch = Batch(problems, cands, obj.get("timeout_s"), obj.get("memory_mb"))
    try:
        from .runner import _check_overrides
        _check_overrides(batch.timeout_s, batch.memory_mb)
    except (ValueError, TypeError) as e:
        raise RequestRefused(HTTPStatus.BAD_REQUEST, f"timeout_s/memory_mb: {e}") from None
    return batch


class SandboxService(ThreadingHTTPServer):
    """The HTTP server of one replica: its config, its Runner and the bound on connections."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, config: ServiceConfig, runner: Runner):
        self.config = config
        self.runner = runner
        self.token = config.token.encode()
        self.busy = 0
        """Candidates accepted and not yet finished (queued or running)."""
        self.busy_lock = threading.Lock()
        self.admission = Admission(max_work=config.max_connections, max_unauthenticated=config.max_unauthenticated,
                                   max_per_peer=config.max_unauthenticated_per_peer,
                                   timeout_s=config.request_timeout_s, body_timeout_s=config.body_deadline_s)
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        self.address_family = family
        super().__init__((config.host, config.port), Handler)
        self.admission.start()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def process_request(self, request, client_address) -> None:
        self.admission.admit(request, str(client_address[0]))  # on the accepting thread: cuts are immediate
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.admission.release(self.admission.ticket(request))

    def server_close(self) -> None:
        self.admission.stop()
        super().server_close()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # the client went, or was cut: no traceback to show
            return
        super().handle_error(request, client_address)

    def add_busy(self, n: int) -> None:
        with self.busy_lock:
            self.busy += n


class Handler(BaseHTTPRequestHandler):
    """One connection: one request (the connection closes after each answer)."""

    protocol_version = "HTTP/1.1"
    server: SandboxService
    server_version = "crucible-sandbox"

    def setup(self) -> None:
        # Every read and write on the socket; the whole request line and headers (not one byte per
        # timeout) must arrive before the admission's deadline, or the reaper cuts the connection.
        self.timeout = self.server.config.request_timeout_s
        super().setup()
        self.ticket: Ticket = self.server.admission.ticket(self.request)

    def parse_request(self) -> bool:
        # A cut connection's read ends early: what arrived is a fragment, never a request to answer.
        if self.ticket.cut or not super().parse_request() or self.ticket.cut:
            self.close_connection = True
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if self.ticket.cut:  # nobody to tell (the stdlib answers a malformed fragment with a 400)
            self.close_connection = True
            return
        super().send_error(code, message, explain)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self) -> None:
        if self.path == HEALTH_PATH:
            self._json(HTTPStatus.OK, {"ok": True, "workers": self.server.runner.workers,
                                       "busy": self.server.busy})
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path[:200]!r}; "
                                                       f"try POST {RUN_BATCH_PATH} or GET {HEALTH_PATH}"})

    def do_POST(self) -> None:
        try:
            if self.path != RUN_BATCH_PATH:
                raise RequestRefused(HTTPStatus.NOT_FOUND, f"no such path {self.path[:200]!r}; "
                                                           f"POST {RUN_BATCH_PATH}")
            self._authorize()
            if not self.server.admission.authenticate(self.ticket):
                raise RequestRefused(HTTPStatus.SERVICE_UNAVAILABLE,
                                     f"{self.server.config.max_connections} requests are running (this replica's "
                                     "--max-connections); retry later")
            batch = parse_batch(self._read_body(), self.server.config.max_candidates,
                                self.server.config.max_json_depth)
        except RequestRefused as e:
            self._json(e.status, {"error": str(e)})
            return
        except (socket.timeout, ConnectionError):
            self.close_connection = True
            return
        self._stream(batch)

    def do_PUT(self) -> None:
        self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"use POST {RUN_BATCH_PATH} or GET {HEALTH_PATH}"})

    do_DELETE = do_PATCH = do_PUT

    # -- request --------------------------------------------------------------------------------
    def _authorize(self) -> None:
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.server.token):
            raise RequestRefused(HTTPStatus.UNAUTHORIZED, f"missing or wrong token: send `Authorization: Bearer "
                                                          f"<token>` with the replica's {TOKEN_ENV}")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise RequestRefused(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not chunked")
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            raise RequestRefused(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
        n, limit = int(length), self.server.config.max_body_bytes
        if n > limit:
            raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                 f"body of {n} bytes; this replica takes at most {limit} (split the batch)")
        deadline = time.monotonic() + self.server.admission.body_deadline_s()
        parts, got = [], 0
        while got < n:
            if time.monotonic() > deadline:
                raise socket.timeout("body not received in time")
            part = self.rfile.read1(min(n - got, 1 << 20))
            if not part:
                raise ConnectionError("the client closed the connection mid-body")
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    # -- answer ---------------------------------------------------------------------------------
    def _json(self, status: HTTPStatus, obj: dict) -> None:
        body = (json.dumps(obj) + "\n").encode()
        self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            if status is HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", 'Bearer realm="crucible-sandbox"')
            if status is HTTPStatus.SERVICE_UNAVAILABLE:
                self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if status is not HTTPStatus.OK:
                linger(self.connection)
        except OSError:
            pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, batch: Batch) -> None:
        """Run the batch on the shared Runner and write its results in order as they finish."""
        self.close_connection = True
        n = len(batch.candidates)
        finished: queue.Queue = queue.Queue()
        cancel = threading.Event()
        self.server.add_busy(n)
        started = time.monotonic()

        def on_result(i: int, res) -> None:
            self.server.add_busy(-1)
            finished.put((i, res))

        future = self.server.runner.submit_batch(batch.problems, batch.candidates, timeout_s=batch.timeout_s,
                                                 memory_mb=batch.memory_mb, on_result=on_result, cancel=cancel)
        try:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self._write_in_order(batch, finished)
            results = future.result()
            isolation = next((r.isolation for r in results if r.isolation != "none"), "none")
            summary = {**summarize(results, time.monotonic() - started, isolation),
                       "mode": self.server.runner.mode, "workers": self.server.runner.workers}
            self._chunk((json.dumps({"summary": summary}) + "\n").encode())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client left (or stopped reading): what has not started is not run
            cancel.set()

    def _write_in_order(self, batch: Batch, finished: queue.Queue) -> None:
        ready: dict = {}
        sent, n = 0, len(batch.candidates)
        while sent < n:
            try:
                i, res = finished.get(timeout=self.server.config.heartbeat_s)
            except queue.Empty:
                self._chunk(b"\n")
                continue
            ready[i] = res
            while True:  # whatever else has finished goes out in the same write
                try:
                    i, res = finished.get_nowait()
                except queue.Empty:
                    break
                ready[i] = res
            lines = []
            while sent in ready:
                res = ready.pop(sent)
                line = {**res.to_dict(), "problem_id": batch.candidates[sent].problem_id, "candidate_index": sent}
                lines.append(json.dumps(line))
                sent += 1
            if lines:
                self._chunk(("\n".join(lines) + "\n").encode("ascii"))


def linger(sock: socket.socket, max_s: float = 2.0) -> None:
    """After an answer to a request whose body was not read: stop writing and discard what the client
    still sends, for at most `max_s`, so that closing does not reset the connection and throw away
    the answer before the client has read it."""
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(1 << 20):
                return
    except OSError:
        pass


def serve(config: ServiceConfig, *, ready=None) -> None:
    """Serve until SIGTERM/SIGINT. `ready(service)` is called once it is listening."""
    with Runner(backend=config.backend, workers=config.workers or None, mode=config.mode) as runner:
        runner.start()
        service = SandboxService(config, runner)
        stopping = threading.Event()

        def stop(*_: Any) -> None:
            if not stopping.is_set():
                stopping.set()
                threading.Thread(target=service.shutdown, daemon=True).start()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
        if ready is not None:
            ready(service)
        try:
            service.serve_forever(poll_interval=0.5)
        finally:
            service.server_close()


def config_from_env(**kw: Any) -> ServiceConfig:
    return ServiceConfig(token=os.environ.get(TOKEN_ENV, ""), **kw)
