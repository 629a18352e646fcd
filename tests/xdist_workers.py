"""`pytest -n N -p tests.xdist_workers`: each pytest-xdist worker keeps its files and services apart.

Loaded with ``-p``, so before pytest-django imports the settings (the root conftest comes too late),
it gives the worker ``gwK`` its own data dir, ``var/test-gwK``: its own SQLite database, runs and
embedded Redis (whose socket lives there). Shared, the workers' runs (both databases number their
first run 1) would broadcast to the same ``run-1`` group of one Redis and queue the same jobs.
With REDIS_URL or DATABASE_URL given (CI), the workers would share those services: it refuses.
"""
import os
from pathlib import Path

WORKER = os.environ.get("PYTEST_XDIST_WORKER")
GIVEN = "PYTEST_XDIST_GIVEN_SERVICES"  # not CRUCIBLE_*: the app never reads it

if not WORKER:
    # The controller, before its settings export the embedded Redis's URL for child processes: what
    # the user gave, for the workers to tell it from that export.
    os.environ[GIVEN] = " ".join(name for name in ("REDIS_URL", "DATABASE_URL") if os.environ.get(name))
else:
    if os.environ.get(GIVEN):
        raise RuntimeError(f"pytest -n with {os.environ[GIVEN]} set: the workers would share those services; "
                           "run without -n (as `make test` does) or unset them")
    os.environ.pop("REDIS_URL", None)  # the controller's embedded Redis: this worker starts its own
    base = os.environ.get("CRUCIBLE_DATA_DIR") or str(Path(__file__).resolve().parents[1] / "var" / "test")
    os.environ["CRUCIBLE_DATA_DIR"] = f"{base}-{WORKER}"
