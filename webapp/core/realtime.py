"""ASGI middleware for websockets: refuse the handshake cleanly while the channel layer's Redis is away.

Every websocket consumer listens on the channel layer from its first moment; with Redis down that
listener raises during the handshake and daphne answers 500. Instead the handshake is refused (as
for an anonymous user) and the page's reconnect loop, which backs off, tries again later.
"""
from __future__ import annotations

import logging
import time

from django.conf import settings

log = logging.getLogger("crucible.realtime")

PING_TIMEOUT_S = 1.0
_down_since: float | None = None   # so that an outage is logged once, not once per handshake


async def redis_reachable(url: str) -> bool:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url, socket_timeout=PING_TIMEOUT_S, socket_connect_timeout=PING_TIMEOUT_S)
    try:
        await client.ping()
        return True
    except (aioredis.RedisError, OSError):
        return False
    finally:
        await client.aclose()


class ChannelLayerGuard:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        global _down_since
        if scope["type"] != "websocket":
            return await self.inner(scope, receive, send)
        if await redis_reachable(settings.REDIS_URL):
            if _down_since is not None:
                log.warning("Redis is back after %.0f s; websockets are served again", time.monotonic() - _down_since)
                _down_since = None
            return await self.inner(scope, receive, send)
        if _down_since is None:
            _down_since = time.monotonic()
            log.warning("Redis (the channel layer) is unreachable: websocket handshakes are refused until it is back")
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": 1013})
