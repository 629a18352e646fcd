"""`python -m sandbox serve`: token, bounds, health, and the same results as `python -m sandbox run-batch`."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest

from .replicas import ROOT, TOKEN, replicas

pytestmark = pytest.mark.e2e  # every test talks to `python -m sandbox serve` replicas

PROBLEMS = [
    {"id": "sq", "kind": "function", "entry_point": "f", "tests": ["assert f(2) == 4", "assert f(-3) == 9"],
     "time_limit_s": 1.0, "memory_limit_mb": 128},
    {"id": "sum", "kind": "stdio", "test_cases": [{"input": "1 2\n", "output": "3\n"},
                                                  {"input": "5 5\n", "output": "10\n"}],
     "time_limit_s": 1.0, "memory_limit_mb": 128},
]
CANDIDATES = [
    {"problem_id": "sq", "code": "def f(x):\n    return x * x\n"},
    {"problem_id": "sq", "code": "def f(x):\n    return 4\n"},
    {"problem_id": "sq", "code": "def f(x) return\n"},
    {"problem_id": "sq", "code": "def f(x):\n    while True:\n        pass\n"},
    {"problem_id": "sum", "code": "a, b = map(int, input().split())\nprint(a + b)\n"},
    {"problem_id": "sum", "code": "print(3)\n"},
    {"problem_id": "sq", "completion": "def f(x):\n    return x ** 2\n"},
    {"problem_id": "sq", "code": "import sys\ndef f(x):\n    sys.exit(0)\n"},
]
VOLATILE = ("wall_time_s", "cpu_time_s", "peak_memory_mb")


@pytest.fixture(scope="module")
def replica():
    with replicas(1, "--max-body-mb", "1", "--max-candidates", "16") as started:
        yield started[0]


def post(url: str, body: bytes, token: str | None = TOKEN, headers: dict | None = None):
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    h = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    conn.request("POST", "/v1/run-batch", body=body, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def batch_body(problems=PROBLEMS, candidates=CANDIDATES, **extra) -> bytes:
    return json.dumps({"problems": problems, "candidates": candidates, **extra}).encode()


def lines_of(data: bytes) -> list[dict]:
    """The JSON lines of a streamed answer (blank lines are heartbeats)."""
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def stable(line: dict) -> dict:
    """A result without what depends on the machine's load: timings, and for a timeout which limit
    (CPU or wall clock) ended it first."""
    out = {k: v for k, v in line.items() if k not in VOLATILE}
    out["tests"] = [{k: v for k, v in t.items() if k != "time_s"} for t in line["tests"]]
    if line["status"] == "timeout":
        out.pop("detail"), out.pop("exit_code")
        out["tests"] = [t["passed"] for t in out["tests"]]
    return out


def test_it_refuses_to_start_without_a_token():
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_SANDBOX_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "sandbox", "serve", "--port", "0"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "CRUCIBLE_SANDBOX_TOKEN" in out.stderr


def test_a_request_without_the_token_is_refused(replica):
    status, data = post(replica.url, batch_body(), token=None)
    assert status == 401
    assert "token" in json.loads(data)["error"]


def test_a_request_with_a_wrong_token_is_refused(replica):
    status, _ = post(replica.url, batch_body(), token=TOKEN + "y")
    assert status == 401
    status, _ = post(replica.url, batch_body(), token=TOKEN[:-1])
    assert status == 401


def test_a_body_over_the_limit_is_refused_before_it_is_read(replica):
    parts = urlsplit(replica.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as s:
        s.sendall(b"POST /v1/run-batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(2 << 20).encode() + b"\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):  # the server answers and closes without reading the body
            answer += chunk
        answer = answer.decode()
    assert answer.startswith("HTTP/1.1 413"), answer
    assert "at most 1048576" in answer


def test_a_body_without_a_length_is_refused(replica):
    status, data = post(replica.url, b"", headers={"Transfer-Encoding": "chunked"})
    assert status == 411, data


def test_more_candidates_than_the_limit_are_refused(replica):
    status, data = post(replica.url, batch_body(candidates=CANDIDATES * 3))
    assert status == 413
    assert "at most 16" in json.loads(data)["error"]


def test_a_bad_candidate_is_refused_with_its_position(replica):
    status, data = post(replica.url, batch_body(candidates=[CANDIDATES[0], {"problem_id": "nope", "code": ""}]))
    assert status == 400
    assert "candidates[1]" in json.loads(data)["error"]


def test_a_bad_problem_is_refused_with_its_field(replica):
    status, data = post(replica.url, batch_body(problems=[{"id": "x", "kind": "function"}], candidates=[]))
    assert status == 400
    assert "problems[0]: entry_point" in json.loads(data)["error"]


def test_healthz_says_ok_workers_and_busy(replica):
    assert replica.health() == {"ok": True, "workers": 1, "busy": 0}


def test_results_are_those_of_run_batch_in_candidate_order(replica, tmp_path):
    status, data = post(replica.url, batch_body())
    assert status == 200
    served = lines_of(data)
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CANDIDATES))
    out = subprocess.run([sys.executable, "-m", "sandbox", "run-batch", "--problems", str(tmp_path / "p.jsonl"),
                          "--candidates", str(tmp_path / "c.jsonl"), "--workers", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    printed = [json.loads(line) for line in out.stdout.splitlines()]
    assert [line["candidate_index"] for line in served[:-1]] == list(range(len(CANDIDATES)))
    assert [stable(x) for x in served[:-1]] == [stable(x) for x in printed[:-1]]
    assert [x["status"] for x in served[:-1]] == ["passed", "failed", "syntax_error", "timeout", "passed",
                                                  "failed", "passed", "failed"]
    assert served[-1]["summary"]["candidates"] == len(CANDIDATES)
    assert served[-1]["summary"]["passed"] == 3


def test_the_limits_of_a_request_override_the_problems(replica):
    slow = {"problem_id": "sq", "code": "import time\ndef f(x):\n    time.sleep(0.7)\n    return x * x\n"}
    status, data = post(replica.url, batch_body(candidates=[slow]))  # 1.4 s of a 1 s limit
    assert lines_of(data)[0]["status"] == "timeout"
    status, data = post(replica.url, batch_body(candidates=[slow], timeout_s=5.0))
    assert status == 200
    assert lines_of(data)[0]["status"] == "passed"
    status, data = post(replica.url, batch_body(candidates=[slow], timeout_s=0.0))
    assert status == 400


def test_a_candidate_cannot_reach_the_service_it_runs_under(replica):
    port = urlsplit(replica.url).port
    probe = {"id": "net", "kind": "function", "entry_point": "f", "tests": ["assert f() == 'blocked'"]}
    code = (f"import socket\ndef f():\n    try:\n        socket.create_connection(('127.0.0.1', {port}), "
            "timeout=0.5).close()\n        return 'reached'\n    except OSError:\n        return 'blocked'\n")
    status, data = post(replica.url, batch_body(problems=[probe], candidates=[{"problem_id": "net", "code": code}]))
    assert status == 200
    result = lines_of(data)[0]
    if result["isolation"] != "bwrap":
        pytest.skip(f"no network namespace without bubblewrap (isolation {result['isolation']})")
    assert result["status"] == "passed", result


def test_check_runs_on_replicas_when_given_endpoints(replica, tmp_path):
    good = {**PROBLEMS[0], "reference_solution": "def f(x):\n    return x * x\n"}
    (tmp_path / "p.jsonl").write_text(json.dumps(good) + "\n")
    env = dict(os.environ, CRUCIBLE_SANDBOX_TOKEN=TOKEN)
    out = subprocess.run([sys.executable, "-m", "sandbox", "check", str(tmp_path / "p.jsonl"), "--endpoints",
                          replica.url], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "1 passed, 0 failed"
    gone = subprocess.run([sys.executable, "-m", "sandbox", "check", str(tmp_path / "p.jsonl"), "--endpoints",
                           "http://127.0.0.1:9"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert gone.returncode == 3 and "no sandbox endpoint is left: http://127.0.0.1:9" in gone.stderr


def test_a_client_dripping_its_headers_is_cut_off():
    from sandbox.runner import Runner
    from sandbox.service import SandboxService, ServiceConfig

    config = ServiceConfig(token=TOKEN, port=0, request_timeout_s=1.0)
    with Runner(workers=1) as runner:
        service = SandboxService(config, runner)
        threading.Thread(target=service.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        try:
            with socket.create_connection(service.server_address[:2], timeout=10) as s:
                closed = False
                for _ in range(40):  # one header byte every 0.1 s: never a full request
                    try:
                        s.sendall(b"X")
                        s.settimeout(0.1)
                        if s.recv(1) == b"":
                            closed = True
                            break
                    except socket.timeout:
                        continue
                    except OSError:
                        closed = True
                        break
            assert closed, "the server kept a connection that never finished its headers"
        finally:
            service.shutdown()
            service.server_close()


def test_a_client_that_sends_a_body_over_the_limit_still_reads_the_413(replica):
    big = [{"problem_id": "sq", "code": "x = 1\n" + "#" * (16 << 20)}]  # more than the socket buffers
    for _ in range(3):  # the answer must not be lost to a reset connection
        status, data = post(replica.url, batch_body(candidates=big))
        assert status == 413, data
