"""Settings shared by every mode. Values come from the environment through webapp/env.py, which declares
every variable, its default and its bounds (``env.read``)."""
from __future__ import annotations

from pathlib import Path

import plotly

from webapp import env
from webapp.embedded_redis import celery_broker_url

BASE_DIR = env.BASE_DIR
DATA_DIR = env.data_dir()

DEBUG = env.read("DEBUG")
ALLOWED_HOSTS = env.read("ALLOWED_HOSTS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # its Swagger UI from the wheel's static files, not a CDN (the CSP allows only this origin)
    "webapp.accounts",
    "webapp.core",
    "webapp.problems",
    "webapp.runs",
    "webapp.probes",
    "webapp.evals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.core.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "webapp.accounts.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.database_config(DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
# plotly.js comes from the plotly wheel (no CDN: machines may be offline); served as vendor/plotly/.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/plotly", str(Path(plotly.__file__).parent / "package_data")),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from the finders: no collectstatic needed to start

MEDIA_ROOT = DATA_DIR / "uploads"
UPLOAD_MAX_BYTES = env.read("CRUCIBLE_UPLOAD_MAX_MB") * 1024 * 1024
UPLOAD_MAX_LINES = env.read("CRUCIBLE_UPLOAD_MAX_LINES")
# Uploads whose text is larger are stored and imported by a sandbox worker, off the request path.
UPLOAD_INLINE_BYTES = env.read("CRUCIBLE_UPLOAD_INLINE_MB") * 1024 * 1024
UPLOAD_MAX_EXPANDED_BYTES = env.read("CRUCIBLE_UPLOAD_MAX_EXPANDED_MB") * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# Stop reading an upload at the limit, for pages and the API alike (nothing big reaches disk).
FILE_UPLOAD_HANDLERS = [
    "webapp.problems.uploads.UploadLimitHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

REDIS_URL = env.redis_url(DATA_DIR)

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 defaults socket_timeout to 5 s, and channels-redis then drops every idle
            # websocket after 5 s (channels_redis#422): no timeout on the layer's blocking reads.
            "hosts": [{"address": REDIS_URL, "socket_timeout": None, "socket_connect_timeout": 5}],
            "prefix": "crucible",
            "capacity": 1000,
            "expiry": 60,
        },
    }
}

CELERY_BROKER_URL = celery_broker_url(REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "sandbox"
CELERY_TASK_ROUTES = {
    # The gpu workers are busy supervising runs; the check for runs whose worker died runs beside them.
    "runs.fail_lost_runs": {"queue": "sandbox"},
    "runs.republish_queued_runs": {"queue": "sandbox"},
    "runs.*": {"queue": "gpu"},
    # Samples from a model for seconds to minutes: the short-job lane of the gpu workers (a worker of its
    # own, and any idle gpu worker), never behind a run (webapp.core.queueing).
    "problems.probe": {"queue": "gpu_short"},
    "problems.*": {"queue": "sandbox"},
    "probes.*": {"queue": "sandbox"},
    "evals.evaluate": {"queue": "gpu"}, "evals.*": {"queue": "sandbox"},  # benchmark evaluations sample a model
    "core.*": {"queue": "sandbox"},
}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 7 * 24 * 3600,  # long runs must not be redelivered
    "socket_connect_timeout": 5,          # a request that publishes fails fast when Redis is gone
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery beat (`make run`: inside the sandbox worker; compose: the `beat` service) looks for runs whose
# supervisor died every minute, so a lost run turns `failed` even if nobody opens its page, and
# publishes again the tasks of queued runs and pending validations that the broker does not hold
# (a publish that failed while Redis was down, a message lost with a restarted Redis).
CELERY_BEAT_SCHEDULE = {
    "fail-lost-runs": {"task": "runs.fail_lost_runs", "schedule": 60.0, "options": {"expires": 55}},
    "republish-queued-runs": {"task": "runs.republish_queued_runs", "schedule": 30.0, "options": {"expires": 25}},
    "republish-pending-validations": {"task": "problems.republish_pending_validations", "schedule": 30.0,
                                      "options": {"expires": 25}},
    "sweep-probes": {"task": "probes.sweep", "schedule": 30.0, "options": {"expires": 25}},
    "sweep-evals": {"task": "evals.sweep", "schedule": 30.0, "options": {"expires": 25}},
}
# A run supervisor survives a broker reconnect; a redelivered copy finds the run owned and stops.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

RUNS_DIR = DATA_DIR / "runs"
MODELS_DIR = DATA_DIR / "models"
PROBLEM_SETS_DIR = DATA_DIR / "problem-sets"  # per set: probes/<id>/ (the difficulty probes' files)
PROBE_MAX_SAMPLES = env.read("CRUCIBLE_PROBE_MAX_SAMPLES")
HF_OFFLINE = env.read("CRUCIBLE_HF_OFFLINE")
VLLM_URLS = [u.rstrip("/") for u in env.read("CRUCIBLE_VLLM_URLS")]  # servers a web run may name as vllm.url
GPU_COUNT = env.read("CRUCIBLE_GPUS_PER_RUN")
CONFIG_CEILINGS = env.config_ceilings()  # {"train.steps": N, ...}: this server's limits on a web-sent run

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"health_answers": {"()": "webapp.logfilters.HealthAnswers"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"crucible": {"level": "INFO"},
                # A /healthz 503 (services still starting) is logged at INFO, not as an ERROR.
                "django.request": {"level": "ERROR", "filters": ["health_answers"]}},
}
