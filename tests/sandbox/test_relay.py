"""The docker backend's relay protocol (streams multiplexed over one byte stream), exercised with
local relay workers since no Docker engine runs here. These workers isolate nothing: only the
protocol and the verdict logic are under test."""

from __future__ import annotations

import pytest

from sandbox.backends.docker import LocalRelayExecutor
from sandbox.result import Outcome

from .conftest import fn_problem, limits, stdio_problem

SQUARE = fn_problem(["assert f(2) == 4", "assert f(3) == 9"])


@pytest.fixture(scope="module")
def relay():
    ex = LocalRelayExecutor()
    yield ex
    ex.close()


def run(ex, problem, code):
    return ex.run(problem, code, limits(problem))


def test_relay_workers_pass_a_correct_function_and_capture_its_output(relay):
    res = run(relay, SQUARE, "def f(x):\n    print('hi', x)\n    return x * x\n")
    assert res.status is Outcome.PASSED, res.to_dict()
    assert res.stdout == "hi 2\nhi 3\n"


def test_relay_workers_report_timeouts_and_output_floods(relay):
    assert run(relay, SQUARE, "while True: pass").status is Outcome.TIMEOUT
    flood = run(relay, SQUARE, "while True: print('x' * 10000)")
    assert flood.status is Outcome.OUTPUT_LIMIT and flood.stdout_truncated


def test_relay_workers_give_no_credit_to_forged_verdicts(relay):
    for code in ("class A:\n    def __eq__(s, o): return True\ndef f(x): return A()",
                 "import os\ndef f(x): return x * x\nos._exit(0)",
                 "import builtins\nbuiltins.AssertionError = ValueError\ndef f(x): return 0"):
        res = run(relay, SQUARE, code)
        assert res.status is not Outcome.PASSED and res.tests_passed == 0, res.to_dict()


def test_relay_workers_run_stdio_programs(relay):
    p = stdio_problem([("1 2\n", "3\n"), ("5 5\n", "10\n")])
    assert run(relay, p, "print(sum(map(int, input().split())))").status is Outcome.PASSED


def test_a_relay_worker_serves_many_executions(relay):
    results = [run(relay, SQUARE, "def f(x):\n    return x * x\n") for _ in range(20)]
    assert all(r.status is Outcome.PASSED for r in results)


def test_a_flood_on_the_reply_channel_does_not_wedge_the_relay(relay):
    res = run(relay, SQUARE, "import os\nwhile True:\n    os.write(4, b'x' * 65536)\n")
    assert res.status is not Outcome.PASSED
    assert run(relay, SQUARE, "def f(x):\n    return x * x\n").status is Outcome.PASSED


def test_the_docker_attach_stream_is_demultiplexed():
    import socket

    from sandbox.backends.docker import _DockerStream
    a, b = socket.socketpair()
    stream = _DockerStream(a)

    def frame(kind: int, payload: bytes) -> bytes:
        return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

    data = frame(1, b"hello ") + frame(2, b"warning") + frame(1, b"world")
    b.sendall(data[:5])
    assert stream.read_chunk() is None  # a partial header is not end of stream
    b.sendall(data[5:])
    got = b""
    while got != b"hello world":
        chunk = stream.read_chunk()
        assert chunk != b""
        got += chunk or b""
    assert stream.stderr == b"warning"
    b.close()
    assert stream.read_chunk() == b""
    a.close()


def test_a_private_dev_shm_is_wiped_with_the_scratch_but_never_the_hosts(tmp_path, monkeypatch):
    """docker gives each container a private /dev/shm tmpfs: its worker wipes it after every
    execution like the scratch. Outside a sandbox (not pid 1) /dev/shm is the host's: left alone."""
    import os

    from sandbox import harness
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    monkeypatch.chdir(tmp_path)
    assert harness._scratch_dirs(namespaced=True) == [str(tmp_path), "/dev/shm"]
    assert harness._scratch_dirs(namespaced=False) == [str(tmp_path)]
    monkeypatch.chdir("/dev/shm")
    assert harness._scratch_dirs(namespaced=True) == ["/dev/shm"]
