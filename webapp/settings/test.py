"""`make test`: DATABASE_URL / REDIS_URL when set, otherwise SQLite and an embedded Redis."""
import os
from pathlib import Path

# Tests keep their files (SQLite file, embedded Redis, runs) apart from `make run`'s var/.
os.environ.setdefault("CRUCIBLE_DATA_DIR", str(Path(__file__).resolve().parents[2] / "var" / "test"))

from webapp import env  # noqa: E402

from .base import *  # noqa: F401,F403
from .base import DATABASES, DATA_DIR

SECRET_KEY = os.environ.get("SECRET_KEY") or "test-only-secret-key-not-for-production-use-0123456789"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so that Celery worker processes started by tests see the same rows.
    DATABASES["default"]["NAME"] = str(DATA_DIR / "test-db.sqlite3")
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}

# Worker processes started by tests may run a scripted stand-in for the trainer (tests/webapp/runs).
CRUCIBLE_TRAINER_MODULE = env.read("CRUCIBLE_TEST_TRAINER_MODULE")
