"""The production compose file has the documented services and passes `docker-compose config`."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_compose_declares_the_production_services():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker-gpu", "worker-sandbox"} <= set(services)
    command = services["worker-gpu"]["command"]
    assert "gpu" in command[command.index("-Q") + 1].split(",")
    assert services["worker-gpu"]["command"][services["worker-gpu"]["command"].index("-c") + 1] == "1"
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia"
    assert "sandbox" in services["worker-sandbox"]["command"]
    assert "daphne" in services["web"]["command"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "webapp", "beat"]  # the periodic lost-run check
    assert "crucible-data" in compose["volumes"]


def test_compose_runs_a_scalable_sandbox_service_that_the_gpu_worker_uses():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    sandbox = services["sandbox"]
    command = sandbox["command"]
    assert command[:4] == ["python", "-m", "sandbox", "serve"]
    assert command[command.index("--host") + 1] == "0.0.0.0" and command[command.index("--port") + 1] == "8700"
    # --scale sandbox=N: no fixed name, no published host port (the compose network reaches it)
    assert "container_name" not in sandbox and "ports" not in sandbox
    assert sandbox["environment"]["CRUCIBLE_SANDBOX_TOKEN"].startswith("${CRUCIBLE_SANDBOX_TOKEN:?")
    assert "depends_on" not in sandbox and "volumes" not in sandbox  # stateless: no database, no shared disk
    gpu = services["worker-gpu"]["environment"]
    assert gpu["CRUCIBLE_SANDBOX_ENDPOINTS"] == "http://sandbox:8700"
    assert gpu["CRUCIBLE_SANDBOX_TOKEN"] == sandbox["environment"]["CRUCIBLE_SANDBOX_TOKEN"]


def test_the_gpu_worker_starts_once_the_sandbox_replicas_answer_their_health_check():
    # A batch fails at once when no replica answers, so a worker up before them fails its first runs.
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    depends = services["worker-gpu"]["depends_on"]
    assert depends["sandbox"] == {"condition": "service_healthy"}
    # Overriding the anchor's depends_on must keep the database and Redis.
    assert depends["postgres"] == depends["redis"] == {"condition": "service_healthy"}
    probe = services["sandbox"]["healthcheck"]["test"]
    assert probe[0] == "CMD" and "http://127.0.0.1:8700/healthz" in probe[-1]


def test_the_gpu_workers_devices_and_its_gpus_per_run_are_the_same_number():
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker-gpu"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["count"] == worker["environment"]["CRUCIBLE_GPUS_PER_RUN"]


def test_the_compose_image_serves_the_gpu_preset_with_its_own_engine_and_kernels():
    # The 9B preset samples with vLLM; the web service refuses such a run unless the engine environment exists
    # where it runs, so every service runs the Dockerfile's `gpu` stage, which builds it and says where.
    from webapp.runs.presets import get_preset

    assert get_preset("qwen3.5-9b-lora-80gb")["config"]["sampling"]["engine"] == "vllm"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["x-app"]["build"]["target"] == "gpu"
    assert compose["services"]["sandbox"]["build"] == compose["x-app"]["build"]
    stages, current = {}, None
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            current = line.split()[-1]
            stages[current] = [line]
        elif current:
            stages[current].append(line)
    assert list(stages)[-1] == "gpu"  # the default target of `docker build .`
    gpu = "\n".join(stages["gpu-deps"])
    assert "pip install -r requirements-gpu.txt" in gpu and "ENV CRUCIBLE_VLLM_PYTHON=/opt/venv-vllm/bin/python" in gpu
    assert "/opt/venv-vllm/bin/pip install \"vllm==${VLLM_VERSION}\"" in gpu and "ARG VLLM_VERSION=0.32.0" in gpu
    assert stages["gpu"][0] == "FROM gpu-deps AS gpu"
    pins = dict(line.split("==") for line in (ROOT / "requirements-gpu.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert pins["torch"] == "2.13.0" and pins["triton"] == "3.7.1"  # the triton torch 2.13.0 pins: past fla's bug
    assert "torch==2.13.0" in (ROOT / "requirements.txt").read_text().splitlines()


def test_compose_file_is_valid_for_docker_compose():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose) so the file cannot be checked")
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_SANDBOX_SERVICE_WORKERS"}
    result = subprocess.run([binary, "config"], cwd=ROOT, capture_output=True, text=True,
                            env=dict(env, SECRET_KEY="check", CRUCIBLE_SANDBOX_TOKEN="check"), timeout=60)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    assert resolved["worker-gpu"]["environment"]["CRUCIBLE_SANDBOX_ENDPOINTS"] == "http://sandbox:8700"
    assert set(resolved["worker-gpu"]["depends_on"]) == {"postgres", "redis", "sandbox"}
    assert resolved["sandbox"]["command"][-1] == "4"  # CRUCIBLE_SANDBOX_SERVICE_WORKERS's default


def test_compose_refuses_to_start_without_the_sandbox_token():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose) so the file cannot be checked")
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_SANDBOX_TOKEN"}
    result = subprocess.run([binary, "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                            env=dict(env, SECRET_KEY="check"), timeout=60)
    assert result.returncode != 0 and "set CRUCIBLE_SANDBOX_TOKEN in .env" in result.stderr
