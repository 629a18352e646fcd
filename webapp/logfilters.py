"""Logging filters of the web app (``LOGGING`` in webapp/settings/base.py)."""
from __future__ import annotations

import logging

HEALTH_PATHS = frozenset({"/healthz"})


class HealthAnswers(logging.Filter):
    """``django.request`` logs every 5xx answer as an ERROR; a 503 from ``/healthz`` is the health check's
    answer (a service is not up yet, as while ``make run`` starts the workers), not a request that failed. It
    stays in the log at INFO, so the ``make run`` terminal (webapp.console) does not show it as an error; what
    is down is in the answer's body."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if getattr(record, "status_code", None) == 503 and getattr(request, "path", None) in HEALTH_PATHS:
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True
