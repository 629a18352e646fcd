"""`RemoteRunner` over two `python -m sandbox serve` replicas (separate processes): the local pool's
verdicts, no lost or doubled result when one dies mid-batch, a clear failure when all are gone."""

from __future__ import annotations

import time

import pytest

from sandbox.problems import Problem
from sandbox.remote import RemoteRunner, RemoteUnavailable, check_endpoint_url, make_runner
from sandbox.runner import Candidate, Runner

from .replicas import TOKEN, replicas

SQUARE = Problem(id="sq", kind="function", entry_point="f", tests=("assert f(2) == 4", "assert f(3) == 9"),
                 time_limit_s=2.0, memory_limit_mb=128)
ECHO = Problem(id="echo", kind="stdio", test_cases=[{"input": "hi\n", "output": "hi\n"}], time_limit_s=2.0,
               memory_limit_mb=128)
PROBLEMS = {p.id: p for p in (SQUARE, ECHO)}
CODES = ["def f(x):\n    return x * x\n", "def f(x):\n    return 4\n", "def f(x:\n", "print(input())\n",
         "print('nope')\n", "raise ValueError('before the tests')\n"]


def batch(n: int, sleep_s: float = 0.0) -> list[Candidate]:
    out = []
    for i in range(n):
        code = CODES[i % len(CODES)]
        pid = "echo" if "print" in code else "sq"
        if sleep_s:
            code = f"import time\ntime.sleep({sleep_s})\n" + code
        out.append(Candidate(problem_id=pid, code=code))
    return out


def verdicts(results) -> list[tuple]:
    return [(r.status.value, tuple(t.passed for t in r.tests)) for r in results]


@pytest.mark.e2e
def test_two_replicas_give_the_verdicts_of_the_local_pool():
    cands = batch(24)
    with Runner(workers=2) as local:
        expected = verdicts(local.run_batch(PROBLEMS, cands))
    with replicas(2) as started:
        runner = RemoteRunner([r.url for r in started], TOKEN)
        got = runner.run_batch(PROBLEMS, cands)
    assert verdicts(got) == expected
    assert runner.workers == 2
    assert {"passed", "failed", "syntax_error", "error"} <= {v[0] for v in expected}


@pytest.mark.e2e
def test_a_replica_killed_mid_batch_loses_and_doubles_nothing():
    cands = batch(16, sleep_s=0.3)
    with Runner(workers=2) as local:
        expected = verdicts(local.run_batch(PROBLEMS, cands))
    with replicas(2) as (doomed, survivor):
        runner = RemoteRunner([doomed.url, survivor.url], TOKEN, requests_per_endpoint=1)
        future = runner.submit_batch(PROBLEMS, cands)
        while doomed.health()["busy"] == 0:  # it has a chunk in hand
            time.sleep(0.05)
        doomed.kill()
        results = future.result(timeout=300)
        survivor_health = survivor.health()
    assert len(results) == len(cands) and all(r is not None for r in results)
    assert verdicts(results) == expected
    assert runner.last_endpoints[0].error is not None, "the killed replica was not noticed"
    assert runner.last_endpoints[1].error is None
    assert survivor_health["busy"] == 0


@pytest.mark.e2e
def test_when_every_replica_is_gone_the_batch_fails_naming_them():
    with replicas(2) as started:
        urls = [r.url for r in started]
        runner = RemoteRunner(urls, TOKEN)
        assert len(runner.run_batch(PROBLEMS, batch(2))) == 2
        for r in started:
            r.kill()
        with pytest.raises(RemoteUnavailable) as err:
            runner.run_batch(PROBLEMS, batch(4))
    message = str(err.value)
    assert all(url in message for url in urls)
    assert "4 of 4 candidates have no result" in message


@pytest.mark.e2e
def test_replicas_dying_mid_batch_fail_it_rather_than_hang():
    with replicas(1) as (only,):
        runner = RemoteRunner([only.url], TOKEN)
        future = runner.submit_batch(PROBLEMS, batch(8, sleep_s=0.3))
        while only.health()["busy"] == 0:
            time.sleep(0.05)
        only.kill()
        with pytest.raises(RemoteUnavailable, match=only.url):
            future.result(timeout=300)


@pytest.mark.e2e
def test_a_wrong_token_is_reported_as_the_replicas_answer():
    with replicas(1) as (only,):
        runner = RemoteRunner([only.url], TOKEN + "-wrong")
        with pytest.raises(RemoteUnavailable, match="401"):
            runner.run_batch(PROBLEMS, batch(1))


def test_it_needs_the_token_from_the_environment(monkeypatch):
    monkeypatch.delenv("CRUCIBLE_SANDBOX_TOKEN", raising=False)
    with pytest.raises(ValueError, match="CRUCIBLE_SANDBOX_TOKEN"):
        RemoteRunner(["http://127.0.0.1:8700"])


@pytest.mark.parametrize("url", ["127.0.0.1:8700", "ftp://host", "http://", "http://u:p@host:1",
                                 "http://host:99999"])
def test_a_bad_endpoint_url_is_refused_with_an_example(url):
    with pytest.raises(ValueError, match="endpoint"):
        check_endpoint_url(url)


def test_no_endpoints_means_the_local_pool(monkeypatch):
    monkeypatch.delenv("CRUCIBLE_SANDBOX_ENDPOINTS", raising=False)
    runner = make_runner(endpoints=[], workers=1)
    try:
        assert isinstance(runner, Runner)
    finally:
        runner.close()
    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", TOKEN)
    assert isinstance(make_runner(endpoints=["http://127.0.0.1:8700"]), RemoteRunner)


@pytest.mark.e2e
def test_concurrent_batches_on_one_client_each_get_their_own_results():
    with replicas(2) as started:
        runner = RemoteRunner([r.url for r in started], TOKEN)
        a, b = batch(6), list(reversed(batch(6)))
        fa, fb = runner.submit_batch(PROBLEMS, a), runner.submit_batch(PROBLEMS, b)
        ra, rb = fa.result(timeout=300), fb.result(timeout=300)
    assert verdicts(ra) == list(reversed(verdicts(rb)))


def test_the_operators_endpoints_are_the_default_and_the_only_ones_allowed(monkeypatch):
    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", TOKEN)
    monkeypatch.setenv("CRUCIBLE_SANDBOX_ENDPOINTS", "http://10.0.0.5:8700, http://10.0.0.6:8700/")
    runner = make_runner(endpoints=[])
    assert isinstance(runner, RemoteRunner)
    assert runner.urls == ["http://10.0.0.5:8700", "http://10.0.0.6:8700"]
    assert make_runner(endpoints=["http://10.0.0.6:8700"]).urls == ["http://10.0.0.6:8700"]
    with pytest.raises(ValueError, match="not one of this worker's CRUCIBLE_SANDBOX_ENDPOINTS"):
        make_runner(endpoints=["http://attacker.example:80"])


@pytest.mark.e2e
def test_replicas_behind_one_name_are_each_used_and_one_dying_costs_nothing(monkeypatch):
    import socket

    from tests.processes import free_port

    real = socket.getaddrinfo
    hosts = ["127.0.0.2", "127.0.0.3"]

    def resolve(host, port, *args, **kw):  # what the orchestrator's DNS answers for a scaled service
        if host == "sandbox.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (h, port)) for h in hosts]
        return real(host, port, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    port = free_port()
    cands = batch(12, sleep_s=0.3)
    with Runner(workers=2) as local:
        expected = verdicts(local.run_batch(PROBLEMS, cands))
    with replicas(2, hosts=hosts, port=port) as (doomed, survivor):
        runner = RemoteRunner([f"http://sandbox.test:{port}"], TOKEN, requests_per_endpoint=1)
        future = runner.submit_batch(PROBLEMS, cands)
        while doomed.health()["busy"] == 0:
            time.sleep(0.05)
        doomed.kill()
        results = future.result(timeout=300)
    assert verdicts(results) == expected
    assert [e.url for e in runner.last_endpoints] == [f"http://{h}:{port}" for h in hosts]
    assert runner.last_endpoints[0].error is not None and runner.last_endpoints[1].error is None


@pytest.mark.e2e
def test_a_replica_at_its_connection_limit_is_asked_again_not_dropped():
    cands = batch(6, sleep_s=0.3)
    with replicas(1, "--max-connections", "1", workers=1) as (only,):
        runner = RemoteRunner([only.url], TOKEN, requests_per_endpoint=2, chunk_per_slot=2)
        results = runner.run_batch(PROBLEMS, cands)
    assert runner.last_endpoints[0].error is None
    with Runner(workers=1) as local:
        assert verdicts(results) == verdicts(local.run_batch(PROBLEMS, cands))


@pytest.mark.e2e
def test_heartbeats_keep_a_slow_batch_alive_past_the_idle_timeout():
    slow = Problem(id="slow", kind="function", entry_point="f", tests=("assert f() == 1",), time_limit_s=10.0,
                   memory_limit_mb=128)
    with replicas(1) as (only,):
        runner = RemoteRunner([only.url], TOKEN, idle_timeout_s=2.5)  # the replica beats every 2 s
        res = runner.run_batch([slow], [Candidate("slow", code="import time\ndef f():\n    time.sleep(6)\n"
                                                                "    return 1\n")])
    assert res[0].passed, res[0].to_dict()
