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
    assert "-Q" in services["worker-gpu"]["command"] and "gpu" in services["worker-gpu"]["command"]
    assert services["worker-gpu"]["command"][services["worker-gpu"]["command"].index("-c") + 1] == "1"
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia"
    assert "sandbox" in services["worker-sandbox"]["command"]
    assert "daphne" in services["web"]["command"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "webapp", "beat"]  # the periodic lost-run check
    assert "crucible-data" in compose["volumes"]


def test_compose_file_is_valid_for_docker_compose():
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose) so the file cannot be checked")
    result = subprocess.run([binary, "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                            env=dict(os.environ, SECRET_KEY="check"), timeout=60)
    assert result.returncode == 0, result.stderr
