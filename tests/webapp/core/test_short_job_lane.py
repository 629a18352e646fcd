"""Every way of starting Crucible starts a worker for the short-job queue, and the gpu workers take short
jobs too (so that a deployment without the short-job worker still runs them)."""
from pathlib import Path

import yaml

from webapp.celery import app
from webapp.launcher import child_commands

ROOT = Path(__file__).resolve().parents[3]


def queues_of(command: list[str]) -> set[str]:
    return set(command[command.index("-Q") + 1].split(","))


def test_make_run_starts_a_short_job_worker_beside_the_gpu_workers(monkeypatch):
    monkeypatch.delenv("CRUCIBLE_GPU_SHORT_WORKERS", raising=False)
    commands = child_commands(8000)
    assert queues_of(commands["worker-gpu"]) == {"gpu", "gpu_short"}
    short = commands["worker-gpu-short"]
    assert queues_of(short) == {"gpu_short"} and short[short.index("-c") + 1] == "1"
    assert short[short.index("--prefetch-multiplier") + 1] == "1"


def test_no_short_job_worker_when_the_setting_says_none(monkeypatch):
    monkeypatch.setenv("CRUCIBLE_GPU_SHORT_WORKERS", "0")
    commands = child_commands(8000)
    assert "worker-gpu-short" not in commands and "gpu_short" in queues_of(commands["worker-gpu"])


def test_compose_runs_a_short_job_worker_on_a_gpu_and_the_gpu_workers_take_short_jobs_too():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert queues_of(services["worker-gpu"]["command"]) == {"gpu", "gpu_short"}
    short = services["worker-gpu-short"]
    assert queues_of(short["command"]) == {"gpu_short"} and short["command"][short["command"].index("-c") + 1] == "1"
    assert short["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    assert short["environment"] == services["worker-gpu"]["environment"]  # same database, broker, sandbox
    assert short["volumes"] == services["worker-gpu"]["volumes"]


def test_the_gpu_and_sandbox_queues_stay_and_short_jobs_have_their_own():
    assert {"gpu", "gpu_short", "sandbox"} <= set(app.amqp.queues)
    route = lambda name: app.amqp.router.route({}, name)["queue"].name  # noqa: E731
    assert (route("runs.supervise"), route("problems.probe"), route("problems.validate")) == ("gpu", "gpu_short",
                                                                                               "sandbox")
