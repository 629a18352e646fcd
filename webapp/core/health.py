"""Reachability of the services the app needs: database, Redis, Celery workers per queue."""
from __future__ import annotations

from django.conf import settings
from django.db import connection

REQUIRED_QUEUES = ("gpu", "sandbox")


def check_database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return {"ok": True, "vendor": connection.vendor}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def check_redis(url: str | None = None) -> dict:
    import redis

    url = url or settings.REDIS_URL
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        client.ping()
        client.close()
        return {"ok": True}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def check_workers(timeout: float = 1.0) -> dict:
    """Which queues have at least one live worker consuming them (a broadcast ping, `timeout` s)."""
    from webapp.celery import app

    try:
        replies = app.control.inspect(timeout=timeout).active_queues() or {}
    except Exception as exc:
        return {"ok": False, "queues": {q: 0 for q in REQUIRED_QUEUES}, "error": f"{type(exc).__name__}: {exc}"[:300]}
    queues: dict[str, int] = {q: 0 for q in REQUIRED_QUEUES}
    for worker_queues in replies.values():
        for queue in worker_queues:
            queues[queue["name"]] = queues.get(queue["name"], 0) + 1
    ok = all(queues[q] > 0 for q in REQUIRED_QUEUES)
    result = {"ok": ok, "queues": queues, "workers": sorted(replies)}
    if not ok:
        missing = [q for q in REQUIRED_QUEUES if queues[q] == 0]
        result["error"] = "no worker consumes queue " + ", ".join(missing)
    return result


def health() -> tuple[dict, bool]:
    report = {"database": check_database(), "redis": check_redis()}
    # Without Redis the worker ping can only time out; say so instead of waiting.
    if report["redis"]["ok"]:
        report["workers"] = check_workers()
    else:
        report["workers"] = {"ok": False, "queues": {q: 0 for q in REQUIRED_QUEUES}, "error": "Redis unreachable"}
    return report, all(part["ok"] for part in report.values())
