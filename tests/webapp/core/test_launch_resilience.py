"""Launching survives anonymous health-check traffic and a Redis outage (issue 13, finding 2).

Real processes: daphne, a Celery worker and, for the outage, a private redis-server this test stops
and starts (never the shared one). Runs use an instant stand-in trainer so that "a launch that runs"
means: published, picked up by the worker, finished.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from webapp.accounts.models import ApiToken
from webapp.runs.models import Run

from tests.factories import make_problem_set
from tests.processes import free_port, spawn, stop, wait_for_port

ROOT = Path(__file__).resolve().parents[3]
TRAINER = "tests.webapp.fake_trainer"  # without a scripted.json: start, one step, done
CONFIG = {"train": {"steps": 1}, "sampling": {"problems_per_step": 2, "candidates_per_problem": 2}}


class Stack:
    """daphne, a worker and (optionally) a private Redis, all on this test's database."""

    def __init__(self, env: dict, tmp_path: Path):
        self.env, self.tmp = dict(env, CRUCIBLE_TEST_TRAINER_MODULE=TRAINER), tmp_path
        self.procs: dict[str, subprocess.Popen] = {}
        self.redis_port: int | None = None

    def start_redis(self, port: int | None = None) -> None:
        from webapp.embedded_redis import find_redis_server

        self.redis_port = port or self.redis_port or free_port()
        log = self.tmp / "redis.log"
        proc = spawn([find_redis_server(), "--port", str(self.redis_port), "--bind", "127.0.0.1",
                      "--save", "", "--appendonly", "no"], self.env, log)
        wait_for_port(self.redis_port, proc, log)
        self.procs["redis"] = proc
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{self.redis_port}/0"

    def stop_redis(self) -> None:
        stop(self.procs.pop("redis"))

    def start_web(self) -> str:
        port, log = free_port(), self.tmp / "daphne.log"
        proc = spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
                     self.env, log)
        wait_for_port(port, proc, log)
        self.procs["web"] = proc
        return f"http://127.0.0.1:{port}"

    def start_worker(self) -> None:
        log = self.tmp / "worker.log"
        self.procs["worker"] = spawn(
            [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "gpu,sandbox", "-c", "2",
             "-n", f"launch-{os.getpid()}-{time.monotonic_ns()}@localhost", "--prefetch-multiplier", "1",
             "--without-gossip", "--without-mingle", "-l", "INFO"], self.env, log)

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def close(self) -> None:
        for name in ("worker", "web", "redis"):
            if name in self.procs:
                stop(self.procs.pop(name))


@pytest.fixture
def stack(service_env, transactional_db, tmp_path, installed_demo_models):
    from webapp.celery import app

    app.control.purge()
    s = Stack(service_env, tmp_path)
    yield s
    s.close()


def launch(base_url: str, token: str, problem_set_id: int, name: str) -> requests.Response:
    return requests.post(f"{base_url}/api/runs", json={"name": name, "problem_set": problem_set_id, "config": CONFIG},
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)


def wait_until_finished(stack: Stack, run_id: int, timeout: float = 90) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.is_finished:
            return run
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} is still {run.status}; worker log:\n{stack.log('worker')}")


@pytest.mark.e2e
def test_a_burst_of_anonymous_health_checks_leaves_launching_working(stack, user):
    base = stack.start_web()
    stack.start_worker()
    problem_set = make_problem_set(user)
    token = ApiToken.issue(user, "launch")[1]

    def five_checks(_) -> list[int]:
        return [requests.get(f"{base}/healthz", timeout=20).status_code for _ in range(5)]

    with ThreadPoolExecutor(12) as pool:  # the reported burst: 12 clients, 5 requests each
        statuses = [code for codes in pool.map(five_checks, range(12)) for code in codes]
    assert len(statuses) == 60 and set(statuses) <= {200, 503}
    assert requests.get(f"{base}/healthz", timeout=20).status_code in (200, 503)

    response = launch(base, token, problem_set.pk, "after the burst")
    assert response.status_code == 201, response.text
    run = wait_until_finished(stack, response.json()["id"])
    assert run.status == "succeeded", (run.status, run.error)


@pytest.mark.e2e
def test_a_launch_while_redis_is_down_answers_503_and_runs_once_redis_is_back(stack, user):
    import websockets

    stack.start_redis()
    base = stack.start_web()
    problem_set = make_problem_set(user)
    token = ApiToken.issue(user, "launch")[1]
    stack.stop_redis()

    response = launch(base, token, problem_set.pk, "while redis is down")
    assert response.status_code == 503, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["status"] == "queued" and "Redis" in body["detail"]
    run_id = body["id"]
    assert Run.objects.get(pk=run_id).status == "queued"

    async def handshake() -> int:
        url = base.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
        headers = {"Authorization": f"Bearer {token}", "Origin": base}
        try:
            async with websockets.connect(url, additional_headers=headers, open_timeout=10):
                return 101
        except websockets.InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(handshake()) == 403  # refused, not a 500

    stack.start_redis()  # same port: daphne reconnects to it
    stack.start_worker()  # its start publishes again the queued run the broker lost
    run = wait_until_finished(stack, run_id)
    assert run.status == "succeeded", (run.status, run.error)

    response = launch(base, token, problem_set.pk, "after redis came back")
    assert response.status_code == 201, response.text
    run = wait_until_finished(stack, response.json()["id"])
    assert run.status == "succeeded", (run.status, run.error)
