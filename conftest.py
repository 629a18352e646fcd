"""Root fixtures: real services for tests (the test database, Redis, Celery workers, daphne)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.factories import make_user
from tests.processes import free_port, spawn, stop, wait_for_port

ROOT = Path(__file__).resolve().parent
# Tests keep their files apart from `make run`'s var/ (set before Django settings load).
# CRUCIBLE_DATA_DIR for tests defaults to var/test (webapp/settings/test.py).


BROWSER_DIR = ROOT / "tests" / "browser"
# Fixtures that start real processes (a Celery worker, daphne, Chromium): a test that uses one is
# end-to-end. Tests that start such processes themselves (sandbox replicas, trainer subprocesses, vLLM
# servers) carry `pytest.mark.e2e` in their modules.
PROCESS_FIXTURES = {"celery_worker", "live_server_url", "browser"}


def pytest_configure(config):
    # A pytest-xdist worker without tests/xdist_workers.py would share var/test's embedded Redis with
    # the other workers (their runs, numbered alike, would hear each other's events).
    if os.environ.get("PYTEST_XDIST_WORKER") and "tests.xdist_workers" not in sys.modules:
        raise pytest.UsageError("pytest -n needs -p tests.xdist_workers (see README, Development)")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    def is_browser(item) -> bool:
        return BROWSER_DIR in Path(str(item.fspath)).parents

    # Before the other hooks, so that `-m "not e2e"` (which deselects in its own hook) sees the marks.
    for item in items:
        if is_browser(item) or PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
    # Playwright's event loop upsets later asyncio tests: browser tests run last. A wrapper, so
    # the sort happens after pytest-django's own reordering (stable: its order is kept otherwise).
    result = yield
    items.sort(key=is_browser)
    return result


@pytest.fixture(scope="session")
def installed_demo_models():
    """The demo models the presets name (``models/tiny``, ``models/tiny-qwen3_5`` under the test data
    dir), built once (untrained, seconds) when a fresh checkout has none. Requested by the fixtures
    that start a worker or a live server (their runs, probes and preset lists resolve these names in
    the test data dir) and by in-process tests that create a run naming ``models/tiny`` without a stub
    (tests/webapp/runs installs stubs instead), since a model name resolves only to an installed model."""
    from django.conf import settings

    from training.tiny_model import build_tiny_model

    built = {}
    for name, arch in (("tiny", "qwen3"), ("tiny-qwen3_5", "qwen3_5")):
        target = Path(settings.MODELS_DIR) / name
        if not (target / "crucible_tiny.json").exists():  # written last: a finished build
            build_tiny_model(target, arch=arch)
        built[name] = target
    return built


@pytest.fixture(scope="session")
def service_env(django_db_setup, django_db_blocker):
    """Environment for child processes (workers, daphne) so they use the same test database and Redis."""
    from django.conf import settings
    from django.db import connection

    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings.test", REDIS_URL=settings.REDIS_URL,
               PYTHONUNBUFFERED="1")
    db = connection.settings_dict
    if db["ENGINE"].endswith("postgresql"):
        user = db.get("USER") or "postgres"
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        env["DATABASE_URL"] = f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    else:
        env.pop("DATABASE_URL", None)  # test settings point SQLite at a shared file
    yield env
    if db["ENGINE"].endswith("postgresql"):
        _await_other_sessions(django_db_blocker)


def _await_other_sessions(django_db_blocker, timeout_s: float = 10.0) -> None:
    """Before the test database is dropped: PostgreSQL ends a killed worker's backend a moment
    after the worker is gone, and DROP DATABASE refuses while one is left ("being accessed by
    other users"). Wait for them, then end any that remain."""
    from django.db import connection

    others = ("FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        deadline = time.monotonic() + timeout_s
        while True:
            cursor.execute(f"SELECT count(*) {others}")
            if cursor.fetchone()[0] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        cursor.execute(f"SELECT pg_terminate_backend(pid) {others}")
    connection.close()


@pytest.fixture
def celery_worker(service_env, transactional_db, tmp_path, installed_demo_models):
    """A real Celery worker process consuming every queue (gpu, gpu_short, sandbox); yields its node name."""
    from webapp.celery import app

    app.control.purge()  # nothing left over from an earlier session may run against this database
    name = f"test-{os.getpid()}-{time.monotonic_ns()}@localhost"
    log = tmp_path / "worker.log"
    proc = spawn([sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "gpu,gpu_short,sandbox", "-c", "2",
                  "-n", name, "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle", "-l", "INFO"],
                 service_env, log)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited: {log.read_text()[-3000:]}")
            if any(name in reply for reply in app.control.ping(destination=[name], timeout=0.5)):
                break
        else:
            raise RuntimeError(f"celery worker did not answer: {log.read_text()[-3000:]}")
        yield name
    finally:
        stop(proc)


@pytest.fixture
def live_server_url(service_env, transactional_db, tmp_path, installed_demo_models):
    """daphne serving the ASGI app (HTTP + websockets) on a free port."""
    port = free_port()
    log = tmp_path / "daphne.log"
    proc = spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
                 service_env, log)
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture
def user(db):
    """alice, password ``alice-password-1``."""
    return make_user("alice")


@pytest.fixture
def other_user(db):
    """bob, password ``bob-password-1``."""
    return make_user("bob")


@pytest.fixture
def staff_user(db):
    """carol (staff), password ``carol-password-1``."""
    return make_user("carol", is_staff=True)


@pytest.fixture
def client_alice(client, user):
    client.force_login(user)
    return client
