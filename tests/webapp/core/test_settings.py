"""Settings load in every mode and fail loudly, naming the variable, on bad values."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STRONG_KEY = "k3Jq9-vX_2mPz8rT4wYb6nLc0dFh5sAe7gKu1iOo3qRt9yUx2vWz"


def load(module: str, tmp_path, **env_overrides) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL")}
    env.update(CRUCIBLE_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE=module)
    env.setdefault("REDIS_URL", os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    env.update(env_overrides)
    code = "import django; django.setup(); from django.conf import settings; print(settings.DATABASES['default']['ENGINE'], settings.DEBUG)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("module", ["webapp.settings.local", "webapp.settings.test"])
def test_settings_load_with_embedded_defaults(module, tmp_path):
    result = load(module, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "sqlite3" in result.stdout


def test_production_settings_load_with_required_variables(tmp_path):
    result = load("webapp.settings.production", tmp_path, SECRET_KEY=STRONG_KEY, ALLOWED_HOSTS="crucible.example",
                  DATABASE_URL="postgres://postgres@127.0.0.1:5432/test")
    assert result.returncode == 0, result.stderr
    assert "postgresql False" in result.stdout


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    result = load("webapp.settings.production", tmp_path, ALLOWED_HOSTS="crucible.example")
    assert result.returncode != 0
    assert "SECRET_KEY is required in production" in result.stderr


@pytest.mark.parametrize("key", ["x", "x" * 50, "short-but-random-9f3k"])
def test_production_refuses_a_short_or_repetitive_secret_key(key, tmp_path):
    result = load("webapp.settings.production", tmp_path, SECRET_KEY=key, ALLOWED_HOSTS="crucible.example",
                  DATABASE_URL="postgres://postgres@127.0.0.1:5432/test")
    assert result.returncode != 0
    assert "SECRET_KEY is too weak" in result.stderr and "token_urlsafe(50)" in result.stderr


def test_the_data_dir_and_sqlite_database_are_private_to_their_owner(tmp_path):
    data = tmp_path / "data"
    result = load("webapp.settings.local", tmp_path, CRUCIBLE_DATA_DIR=str(data))
    assert result.returncode == 0, result.stderr
    code = ("import django; django.setup(); from django.db import connection; "
            "connection.cursor().execute('CREATE TABLE t (x int)')")
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    env.update(CRUCIBLE_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="webapp.settings.local")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (data.stat().st_mode & 0o777) == 0o700
    assert (data / "db.sqlite3").stat().st_mode & 0o077 == 0


def test_local_secret_key_is_generated_once_and_kept(tmp_path):
    assert load("webapp.settings.local", tmp_path).returncode == 0
    key = (tmp_path / "secret_key").read_text()
    assert len(key) > 40
    assert load("webapp.settings.local", tmp_path).returncode == 0
    assert (tmp_path / "secret_key").read_text() == key


@pytest.mark.parametrize("name,value,message", [
    ("DATABASE_URL", "mysqlx://nowhere", "DATABASE_URL='mysqlx://nowhere'"),
    ("REDIS_URL", "http://localhost:6379", "REDIS_URL='http://localhost:6379'"),
    ("DEBUG", "maybe", "DEBUG='maybe'"),
    ("CRUCIBLE_UPLOAD_MAX_MB", "lots", "CRUCIBLE_UPLOAD_MAX_MB='lots'"),
    ("CRUCIBLE_HF_OFFLINE", "perhaps", "CRUCIBLE_HF_OFFLINE='perhaps'"),
])
def test_bad_environment_values_fail_loudly_naming_the_variable(name, value, message, tmp_path):
    result = load("webapp.settings.local", tmp_path, **{name: value})
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.e2e  # starts a redis-server of its own
def test_embedded_redis_starts_when_no_redis_url_is_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(CRUCIBLE_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="webapp.settings.local")
    code = ("import django; django.setup(); from django.conf import settings; import redis; "
            "r = redis.Redis.from_url(settings.REDIS_URL); print(settings.REDIS_URL, r.ping(), r.config_get('save'))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"unix://{tmp_path}/redis/redis.sock True" in result.stdout
    assert "'save': ''" in result.stdout  # persistence off
    # The server stopped with the process that started it: nothing is left listening.
    import socket
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError):
        s.connect(str(tmp_path / "redis" / "redis.sock"))
