"""`make run`: SQLite and an embedded Redis under var/ unless DATABASE_URL / REDIS_URL say otherwise."""
from webapp import env

from .base import *  # noqa: F401,F403
from .base import DATA_DIR

SECRET_KEY = env.local_secret_key(DATA_DIR)
DEBUG = env.read("DEBUG")
