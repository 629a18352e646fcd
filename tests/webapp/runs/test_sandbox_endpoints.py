"""A run config from the web may name only the server's own sandbox replicas: the gpu worker sends its
sandbox token to every endpoint of a run."""
import pytest

from training.config import ConfigError
from webapp.runs.config import validate_config


@pytest.mark.django_db
def test_a_web_config_cannot_send_the_sandbox_token_to_its_own_endpoint(user, monkeypatch):
    monkeypatch.delenv("CRUCIBLE_SANDBOX_ENDPOINTS", raising=False)
    with pytest.raises(ConfigError) as err:
        validate_config({"sandbox": {"endpoints": ["http://attacker.example:8700"]}}, user)
    assert err.value.field == "sandbox.endpoints" and "CRUCIBLE_SANDBOX_ENDPOINTS is unset" in str(err.value)
    monkeypatch.setenv("CRUCIBLE_SANDBOX_ENDPOINTS", "http://sandbox:8700")
    with pytest.raises(ConfigError, match="not one of this server's sandbox replicas"):
        validate_config({"sandbox": {"endpoints": ["http://attacker.example:8700"]}}, user)


@pytest.mark.django_db
def test_a_web_config_may_name_the_servers_own_replicas(user, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_SANDBOX_ENDPOINTS", "http://sandbox:8700")
    full = validate_config({"model": {"name_or_path": "Qwen/Qwen3-0.6B"},
                            "sandbox": {"endpoints": ["http://sandbox:8700/"]}}, user)
    assert full["sandbox"]["endpoints"] == ["http://sandbox:8700/"]
