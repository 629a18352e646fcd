"""`make run`'s terminal during start-up: a /healthz poll answered 503 (a worker not up yet) is logged at INFO,
so the terminal does not show it as `ERROR ... Service Unavailable`; other 5xx answers stay errors."""
import logging

import pytest
from django.conf import settings as django_settings

from webapp.console import Echo, SeenWarnings
from webapp.logfilters import HealthAnswers


def _terminal_line(record: logging.LogRecord) -> str:
    fmt = django_settings.LOGGING["formatters"]["plain"]["format"]  # what web.log and the terminal see
    return logging.Formatter(fmt).format(record)


@pytest.mark.django_db
def test_a_health_poll_answered_503_is_not_an_error_in_the_terminal(client, settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # as before the services are up: nothing listens
    with caplog.at_level(logging.INFO, logger="django.request"):
        assert client.get("/healthz").status_code == 503
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.levelname == "INFO" and record.getMessage() == "Service Unavailable: /healthz"
    line = _terminal_line(record)
    assert " INFO django.request: Service Unavailable: /healthz" in line  # still in web.log
    assert not Echo(False, SeenWarnings())(line)


def test_other_server_errors_stay_errors_and_reach_the_terminal():
    request = type("Request", (), {"path": "/runs/3/"})()
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "%s: %s",
                               ("Service Unavailable", "/runs/3/"), None)
    record.status_code, record.request = 503, request
    assert HealthAnswers().filter(record) and record.levelname == "ERROR"
    assert Echo(False, SeenWarnings())(_terminal_line(record))
    health = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "%s: %s",
                               ("Internal Server Error", "/healthz"), None)
    health.status_code, health.request = 500, type("Request", (), {"path": "/healthz"})()
    assert HealthAnswers().filter(health) and health.levelname == "ERROR"  # a crash of the check is an error
