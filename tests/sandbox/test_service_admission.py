"""`sandbox serve` under slow and hostile clients: sockets without the token never hold the slots batches
run in, their deadlines shrink under pressure, and a deeply nested body is a 400 naming the limit."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time

import pytest

from sandbox.runner import Runner
from sandbox.service import SandboxService, ServiceConfig

from .replicas import TOKEN

PROBLEM = {"id": "sq", "kind": "function", "entry_point": "f", "tests": ["assert f(2) == 4"],
           "time_limit_s": 2.0, "memory_limit_mb": 128}
BATCH = json.dumps({"problems": [PROBLEM],
                    "candidates": [{"problem_id": "sq", "code": "def f(x):\n    return x * x\n"}]})
HALF_HEADER = b"POST /v1/run-batch HTTP/1.1\r\nHost: sandbox\r\nContent-Le"


@contextlib.contextmanager
def service(**kw):
    """An in-process replica (one worker) with ServiceConfig ``kw``."""
    with Runner(workers=1) as runner:
        svc = SandboxService(ServiceConfig(token=TOKEN, port=0, **kw), runner)
        threading.Thread(target=svc.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        try:
            yield svc
        finally:
            svc.shutdown()
            svc.server_close()


def half_header_sockets(svc, n: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` connections that send half a header and then nothing (from ``source``, a loopback address)."""
    out = []
    for _ in range(n):
        s = socket.create_connection(svc.server_address[:2], timeout=10, source_address=(source, 0))
        s.sendall(HALF_HEADER)
        out.append(s)
    time.sleep(0.3)  # every one accepted and waiting before the test goes on
    return out


def request(svc, method: str, path: str, body: str | None = None, token: str | None = TOKEN):
    conn = http.client.HTTPConnection(*svc.server_address[:2], timeout=60)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def is_closed(s: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``s`` within ``within_s`` seconds."""
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_half_header_sockets_filling_every_slot_leave_health_and_an_authenticated_batch_running():
    with service(max_connections=16) as svc:
        held = half_header_sockets(svc, 16)
        try:
            status, data = request(svc, "GET", "/healthz")
            assert status == 200, data
            status, data = request(svc, "POST", "/v1/run-batch", BATCH)
            assert status == 200, data
            first = json.loads(data.decode().splitlines()[0])
            assert first["status"] == "passed" and first["candidate_index"] == 0
        finally:
            for s in held:
                s.close()


def test_half_header_sockets_from_many_peers_filling_the_pool_do_not_keep_a_batch_out():
    with service(max_connections=4, max_unauthenticated=16, max_unauthenticated_per_peer=4) as svc:
        held = [s for k in range(2, 6) for s in half_header_sockets(svc, 4, f"127.0.0.{k}")]
        try:
            status, data = request(svc, "POST", "/v1/run-batch", BATCH)
            assert status == 200, data
            assert is_closed(held[0], 5), "the oldest unauthenticated socket should have made room"
        finally:
            for s in held:
                s.close()


def test_one_peer_pushes_out_only_its_own_sockets_while_the_pool_has_room():
    with service(max_unauthenticated=16, max_unauthenticated_per_peer=2) as svc:
        other = half_header_sockets(svc, 1, "127.0.0.2")
        mine = half_header_sockets(svc, 5, "127.0.0.3")
        try:
            assert [is_closed(s, 0.5) for s in mine] == [True, True, True, False, False]
            assert not is_closed(other[0], 0.5)
        finally:
            for s in other + mine:
                s.close()


def test_under_pressure_a_half_header_socket_is_cut_long_before_the_full_timeout():
    with service(request_timeout_s=30.0, max_unauthenticated=8, max_unauthenticated_per_peer=8) as svc:
        held = half_header_sockets(svc, 8)
        try:
            # 8 of 8: each has at most an eighth of the 30 s, cut by the reaper well before the full timeout.
            assert is_closed(held[0], 15), "a full pool kept a half-header socket for the whole timeout"
        finally:
            for s in held:
                s.close()


def test_a_deeply_nested_body_is_a_400_naming_the_limit():
    with service(max_json_depth=32) as svc:
        nested = '{"problems": [], "candidates": [], "timeout_s": ' + "[" * 33 + "1" + "]" * 33 + "}"
        for body in ("[" * 50_000 + "]" * 50_000, nested):  # 50,000 deep, and 34 deep (the object, 33 lists)
            status, data = request(svc, "POST", "/v1/run-batch", body)
            assert status == 400, data
            error = json.loads(data)["error"]
            assert "32 levels" in error and "--max-json-depth" in error


def test_a_body_nested_within_the_limit_is_read():
    with service(max_json_depth=32) as svc:
        status, data = request(svc, "POST", "/v1/run-batch", json.dumps({"problems": [], "candidates": [],
                                                                        "timeout_s": None}))
        assert status == 200, data


def test_past_the_work_slots_an_authenticated_request_gets_a_503_saying_so():
    from sandbox.admission import Admission

    admission = Admission(max_work=1, max_unauthenticated=4, max_per_peer=4, timeout_s=30, body_timeout_s=120)
    a, b = socket.socketpair(), socket.socketpair()
    try:
        first, second = admission.admit(a[0], "p"), admission.admit(b[0], "p")
        assert admission.authenticate(first) and not admission.authenticate(second)
        assert admission.counts() == {"unauthenticated": 0, "working": 1}
        admission.release(first)
        assert admission.counts() == {"unauthenticated": 0, "working": 0}
    finally:
        for s in a + b:
            s.close()


def test_deadlines_shrink_with_the_pressure_to_a_tenth():
    from sandbox.admission import Admission

    now = [0.0]
    admission = Admission(max_work=4, max_unauthenticated=10, max_per_peer=5, timeout_s=30, body_timeout_s=100,
                          clock=lambda: now[0])
    pairs = [socket.socketpair() for _ in range(10)]
    try:
        tickets = [admission.admit(pairs[0][0], "a")]
        assert admission.deadline_s("a") == 30  # alone: the whole timeout
        tickets += [admission.admit(pairs[k][0], "a") for k in range(1, 5)]
        assert admission.deadline_s("a") == pytest.approx(30 * 0.2)  # 4 others of 5 from its peer
        tickets += [admission.admit(pairs[k][0], f"p{k}") for k in range(5, 10)]
        assert admission.deadline_s("z") == pytest.approx(30 * 0.1)  # 9 of 10 held by others: the floor
        now[0] = 2.0
        assert admission.reap() == 0
        now[0] = 3.5  # past the floor, within 6 s: the crowded peer's and the full pool's are cut
        assert admission.reap() == 10 and admission.counts()["unauthenticated"] == 0
    finally:
        for p in pairs:
            for s in p:
                s.close()


def test_the_body_deadline_shrinks_as_the_other_requests_hold_the_slots():
    from sandbox.admission import Admission

    admission = Admission(max_work=4, max_unauthenticated=8, max_per_peer=8, timeout_s=30, body_timeout_s=100)
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        tickets = [admission.admit(p[0], "a") for p in pairs]
        assert admission.authenticate(tickets[0]) and admission.body_deadline_s() == 100
        assert all(admission.authenticate(t) for t in tickets[1:])
        assert admission.body_deadline_s() == pytest.approx(100 * 0.25)  # 3 of 4 slots held by the others
    finally:
        for p in pairs:
            for s in p:
                s.close()


def test_a_cut_fragment_is_dropped_without_a_traceback(capfd):
    with service(max_unauthenticated_per_peer=1) as svc:
        held = []
        for fragment in (b"POST /v1/run-b", b"GARBAGE", HALF_HEADER, b"GET /heal"):  # each cuts the one before
            s = socket.create_connection(svc.server_address[:2], timeout=10)
            s.sendall(fragment)
            held.append(s)
            time.sleep(0.2)
        try:
            assert [is_closed(s, 1) for s in held] == [True, True, True, False]
            status, _ = request(svc, "GET", "/healthz")
            assert status == 200
        finally:
            for s in held:
                s.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "400" not in err, err
