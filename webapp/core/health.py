"""Reachability of the services the app needs: database, Redis, Celery workers per queue.

`/healthz` is public, so a report is computed at most once per ``REPORT_TTL_S`` per process and by one
thread at a time; every other request answers with the last report. The worker ping is a broadcast
that waits ``timeout`` seconds for replies: it runs on a connection of its own, never on the app's
shared broker pool. Pinging from many request threads at once through that pool once left every
broker connection of the web process stuck, and with them the publishing of new runs (issue 13).
"""
from __future__ import annotations

import copy
import threading
import time

from django.conf import settings
from django.db import connection

from webapp.celery import app

REQUIRED_QUEUES = ("gpu", "sandbox")
REPORT_TTL_S = 5.0      # a report is reused this long: a burst of requests costs one check
FIRST_REPORT_WAIT_S = 8.0   # longest a request waits for a check already under way when none is cached

_lock = threading.Lock()
_last: tuple[float, dict, bool] | None = None   # (monotonic time, report, ok)


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
    try:
        # A private connection with socket timeouts: bounded, and nothing shared with publishing.
        with app.connection_for_read(transport_options={"socket_timeout": timeout + 2,
                                                        "socket_connect_timeout": 1}) as conn:
            replies = app.control.inspect(timeout=timeout, connection=conn).active_queues() or {}
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


def check_all() -> tuple[dict, bool]:
    """A fresh report (takes up to a second or two: the worker ping waits for replies)."""
    report = {"database": check_database(), "redis": check_redis()}
    # Without Redis the worker ping can only time out; say so instead of waiting.
    if report["redis"]["ok"]:
        report["workers"] = check_workers()
    else:
        report["workers"] = {"ok": False, "queues": {q: 0 for q in REQUIRED_QUEUES}, "error": "Redis unreachable"}
    return report, all(part["ok"] for part in report.values())


def health() -> tuple[dict, bool]:
    """The last report if it is recent or another thread is making a new one, else a new report."""
    global _last
    last = _last
    if last is not None and time.monotonic() - last[0] < REPORT_TTL_S:
        return copy.deepcopy(last[1]), last[2]
    # One check at a time: the others answer with the last report instead of queueing behind it.
    if not _lock.acquire(blocking=last is None, timeout=FIRST_REPORT_WAIT_S if last is None else -1):
        if _last is not None:
            return copy.deepcopy(_last[1]), _last[2]
        busy = {"ok": False, "error": "a health check is under way; ask again in a few seconds"}
        return {"database": busy, "redis": busy, "workers": busy}, False
    try:
        if _last is not None and _last is not last:  # made by the thread we waited for
            return copy.deepcopy(_last[1]), _last[2]
        report, ok = check_all()
        _last = (time.monotonic(), report, ok)
        return copy.deepcopy(report), ok
    finally:
        _lock.release()


def forget() -> None:
    """Drop the cached report (tests, and after a change the next request must see)."""
    global _last
    _last = None


def public_view(report: dict) -> dict:
    """What an anonymous caller may see: the statuses and queue counts, not the workers' host names."""
    out = copy.deepcopy(report)
    out.get("workers", {}).pop("workers", None)
    return out
