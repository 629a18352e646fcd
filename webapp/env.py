"""Configuration from the environment, failing loudly on bad values.

Every variable the app reads is declared here once (name, default, meaning) so that settings, the
launcher and the README table cannot drift apart.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


class ConfigurationError(RuntimeError):
    """A bad environment variable: the message names it and says how to fix it."""


VARIABLES = {
    "DJANGO_SETTINGS_MODULE": "webapp.settings.local (make run), webapp.settings.test (make test), webapp.settings.production",
    "DATABASE_URL": "database URL (postgres://user@host:5432/name); default SQLite at $CRUCIBLE_DATA_DIR/db.sqlite3",
    "REDIS_URL": "Redis for Celery and the channel layer (redis://host:6379/0 or unix:///path.sock); default: a private embedded redis-server on a unix socket under $CRUCIBLE_DATA_DIR",
    "SECRET_KEY": "Django secret key; local: generated once into $CRUCIBLE_DATA_DIR/secret_key; production: required",
    "ALLOWED_HOSTS": "comma-separated host names; default 127.0.0.1,localhost (local), required in production",
    "CRUCIBLE_DATA_DIR": "runs, checkpoints, uploads, models, embedded Redis socket; default ./var",
    "PORT": "port of the web server started by make run (default 8000)",
    "CRUCIBLE_GPU_WORKERS": "Celery worker processes on queue gpu started by make run (default 1)",
    "CRUCIBLE_VERBOSE": "1: make run prints every service log line in its terminal, not only warnings, errors and run state changes (make run VERBOSE=1; the lines are always in $CRUCIBLE_DATA_DIR/logs/) (default 0)",
    "CRUCIBLE_HF_OFFLINE": "1: trainers never reach the Hugging Face hub (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE), so a hub id that is not in the local cache fails at once (default 0)",
    "CRUCIBLE_UPLOAD_MAX_MB": "largest accepted problem-set upload in MiB (default 50)",
    "CRUCIBLE_UPLOAD_MAX_LINES": "most lines read from one problem-set upload, blank ones too (default 100000)",
    "CRUCIBLE_UPLOAD_MAX_EXPANDED_MB": "most MiB a .jsonl.gz upload may decompress to (default 512)",
    "CRUCIBLE_UPLOAD_INLINE_MB": "uploads whose text is at most this many MiB are imported in the request; larger ones by a sandbox worker, with progress (default 2)",
    "DEBUG": "1 to enable Django debug pages (local only; default 0)",
    "CRUCIBLE_VLLM_PYTHON": "python of the vLLM engine environment the gpu worker starts servers from (sampling.engine: vllm); default .venv-vllm/bin/python, which make vllm-env and make test create",
    "CRUCIBLE_VLLM_URLS": "comma-separated vLLM servers a web user may name as vllm.url (default none: runs with engine vllm start their own)",
    "CRUCIBLE_PASSWORD": "password for manage.py create_user (read instead of --password, which the process list shows)",
}

# Per-deployment ceilings on run configs sent to the web app (training.config.check_ceilings): the
# config's own bounds say what the trainer can do, these what this server lends to one run.
CONFIG_CEILINGS = {  # dotted config field: (variable, default)
    "train.steps": ("CRUCIBLE_MAX_STEPS", 100_000),
    "sampling.problems_per_step": ("CRUCIBLE_MAX_PROBLEMS_PER_STEP", 1024),
    "sampling.candidates_per_problem": ("CRUCIBLE_MAX_CANDIDATES_PER_PROBLEM", 256),
    "sampling.max_new_tokens": ("CRUCIBLE_MAX_NEW_TOKENS", 32768),
    "train.eval_samples": ("CRUCIBLE_MAX_EVAL_SAMPLES", 256),
    "sandbox.workers": ("CRUCIBLE_MAX_SANDBOX_WORKERS", 64),
    "sandbox.memory_mb": ("CRUCIBLE_MAX_SANDBOX_MEMORY_MB", 4096),
}
VARIABLES.update({name: f"largest {key} of a run sent to the web app or API (default {default})"
                  for key, (name, default) in CONFIG_CEILINGS.items()})


def config_ceilings() -> dict[str, int]:
    """``{"train.steps": N, ...}`` from the CRUCIBLE_MAX_* variables (each from 1 to 2**31 - 1)."""
    return {key: get_int(name, default, maximum=2**31 - 1) for key, (name, default) in CONFIG_CEILINGS.items()}


def data_dir() -> Path:
    raw = os.environ.get("CRUCIBLE_DATA_DIR", "")
    path = Path(raw).expanduser() if raw else BASE_DIR / "var"
    if not path.is_absolute():
        path = (BASE_DIR / path).resolve()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Uploads, checkpoints, the secret key and the SQLite database: nobody else's business.
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except OSError as exc:
        raise ConfigurationError(f"CRUCIBLE_DATA_DIR={raw!r}: cannot create the directory ({exc})") from exc
    return path


def get_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def get_int(name: str, default: int, *, minimum: int = 1, maximum: int = 1 << 30) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r}: expected a whole number") from None
    if not minimum <= value <= maximum:
        raise ConfigurationError(f"{name}={raw!r}: expected a number from {minimum} to {maximum}")
    return value


def get_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    items = [item.strip() for item in raw.split(",")]
    if any(not item for item in items):
        raise ConfigurationError(f"{name}={raw!r}: empty entry in the comma-separated list")
    return items


SECRET_KEY_MIN_LENGTH = 50      # Django's own deployment check asks for the same
SECRET_KEY_MIN_DISTINCT = 5


def production_secret_key() -> str:
    """SECRET_KEY from the environment; refused when missing, short or repetitive (sessions, CSRF
    tokens and password-reset links are only as strong as it is)."""
    key = os.environ.get("SECRET_KEY", "")
    if not key:
        raise ConfigurationError("SECRET_KEY is required in production (set it to a long random string)")
    if len(key) < SECRET_KEY_MIN_LENGTH or len(set(key)) < SECRET_KEY_MIN_DISTINCT:
        raise ConfigurationError(
            f"SECRET_KEY is too weak ({len(key)} characters, {len(set(key))} different): use at least "
            f"{SECRET_KEY_MIN_LENGTH} random characters, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'")
    return key


def local_secret_key(directory: Path) -> str:
    """The SECRET_KEY from the environment, else one generated once and kept under the data dir."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = directory / "secret_key"
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return key


def database_config(directory: Path) -> dict:
    import dj_database_url

    raw = os.environ.get("DATABASE_URL", "")
    if not raw:
        database = directory / "db.sqlite3"
        # Created owner-only before SQLite opens it (SQLite gives its -wal/-shm files the same mode).
        database.touch(mode=0o600, exist_ok=True)
        if database.stat().st_uid == os.getuid() and database.stat().st_mode & 0o077:
            database.chmod(0o600)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(database),
            # IMMEDIATE: a transaction that reads and then writes (select_for_update is a no-op on SQLite)
            # would otherwise fail at once with "database is locked" when another process writes.
            "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE"},
        }
    try:
        config = dj_database_url.parse(raw, conn_max_age=60, conn_health_checks=True)
    except Exception as exc:  # dj-database-url raises several types for junk input
        raise ConfigurationError(f"DATABASE_URL={raw!r}: not a database URL ({exc})") from None
    if not config.get("ENGINE"):
        raise ConfigurationError(f"DATABASE_URL={raw!r}: unknown scheme; use postgres://... or sqlite:///...")
    return config


def redis_url(directory: Path) -> str:
    """REDIS_URL, or the embedded server's unix socket (started on demand)."""
    raw = os.environ.get("REDIS_URL", "")
    if raw:
        if not raw.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError(f"REDIS_URL={raw!r}: expected redis://host:port/db, rediss://... or unix:///path")
        return raw
    from webapp.embedded_redis import ensure_embedded_redis

    url = ensure_embedded_redis(directory)
    os.environ["REDIS_URL"] = url  # child processes (workers, trainer) reuse the same server
    return url
