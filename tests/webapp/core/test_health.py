"""/healthz reports database, Redis and Celery workers, and answers 503 when one is down."""
import pytest


@pytest.mark.e2e
def test_healthz_is_ok_with_database_redis_and_a_worker_up(client, celery_worker):
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["database"]["ok"] and body["redis"]["ok"]
    assert body["workers"]["ok"] and body["workers"]["queues"]["gpu"] >= 1 and body["workers"]["queues"]["sandbox"] >= 1


@pytest.mark.django_db
def test_healthz_reports_redis_down_with_503(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is False and "Error" in body["redis"]["error"]
    assert body["workers"] == {"ok": False, "queues": {"gpu": 0, "sandbox": 0}, "error": "Redis unreachable"}


@pytest.mark.django_db
def test_healthz_says_which_queue_has_no_worker(client):
    from webapp.core.health import check_workers

    report = check_workers(timeout=0.3)  # no worker started in this test
    assert report["ok"] is False
    assert "no worker consumes queue" in report["error"]
