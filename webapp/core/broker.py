"""Publishing Celery tasks from the web process, and asking the broker which tasks it still holds.

A state change (a run queued, a set marked pending) commits first and publishes its task after the
commit. Publishing can fail (Redis down) or a published message can be lost (Redis restarted without
persistence), so publishing here never raises: a failure is logged and left to the periodic sweeps
of ``webapp.core.jobs``, which compare the database with ``held_task_ids()`` and publish again what
the broker does not hold.
"""
from __future__ import annotations

import json
import logging

from django.conf import settings

from webapp.celery import app

log = logging.getLogger("crucible.broker")

# Bounded: a request that publishes must not wait long for a broker that is down.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}

# kombu's Redis transport keeps a queue's messages in one list per priority step
# ("<queue>", "<queue>\x06\x163", ...) and a worker's delivered, unacknowledged ones in a hash.
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)
_UNACKED_KEY = "unacked"


class BrokerUnavailable(RuntimeError):
    """The broker could not be reached; the message says what failed."""


def publish(name: str, *, args: list, task_id: str) -> bool:
    """Send task ``name`` with ``task_id`` to the queue ``CELERY_TASK_ROUTES`` gives it; False (logged,
    never raised) when the broker is down."""
    try:
        app.send_task(name, args=args, task_id=task_id, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception as exc:  # kombu OperationalError, redis ConnectionError, OSError: all mean "not sent"
        log.warning("could not publish %s %s (%s: %s); the periodic sweep will publish it",
                    name, task_id, type(exc).__name__, exc)
        return False
    return True


def _task_id(raw: bytes | str) -> str | None:
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    if isinstance(message, list) and message:  # the unacked hash stores [message, exchange, routing_key]
        message = message[0]
    if not isinstance(message, dict):
        return None
    headers = message.get("headers") or {}
    properties = message.get("properties") or {}
    return headers.get("id") or properties.get("correlation_id")


def held_task_ids(queue: str) -> set[str]:
    """Ids of the tasks waiting in ``queue`` plus those delivered to any worker and not yet acknowledged.

    Raises ``BrokerUnavailable`` when Redis cannot be read (then nothing can be published either).
    """
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        ids = set()
        for key in [queue] + [f"{queue}{_PRIORITY_SEP}{step}" for step in _PRIORITY_STEPS]:
            ids.update(_task_id(raw) for raw in client.lrange(key, 0, -1))
        ids.update(_task_id(raw) for raw in client.hvals(_UNACKED_KEY))
    except redis.RedisError as exc:
        raise BrokerUnavailable(f"{type(exc).__name__}: {exc}") from exc
    finally:
        client.close()
    ids.discard(None)
    return ids
