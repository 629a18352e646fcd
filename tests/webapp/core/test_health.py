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


REPORT = {"database": {"ok": True}, "redis": {"ok": True},
          "workers": {"ok": True, "queues": {"gpu": 1, "sandbox": 1}, "workers": ["gpu@secret-host"]}}


@pytest.mark.django_db
def test_anonymous_callers_get_the_status_without_worker_host_names(client, user, monkeypatch):
    from webapp.core import health

    monkeypatch.setattr(health, "check_all", lambda: (REPORT, True))
    body = client.get("/healthz").json()
    assert body["workers"]["ok"] is True and body["workers"]["queues"] == {"gpu": 1, "sandbox": 1}
    assert "secret-host" not in str(body)
    client.force_login(user)
    assert client.get("/healthz").json()["workers"]["workers"] == ["gpu@secret-host"]


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_health_checks_costs_one_check(monkeypatch):
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from webapp.core import health

    calls, lock = [], threading.Lock()

    def slow_check():
        with lock:
            calls.append(1)
        time.sleep(0.5)  # the worker ping waits for replies
        return REPORT, True

    monkeypatch.setattr(health, "check_all", slow_check)
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda _: health.health(), range(60)))
    assert len(calls) == 1
    assert all(ok for _, ok in results)
