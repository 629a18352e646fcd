"""Authentication for the JSON API and websockets: session cookie or `Authorization: Bearer TOKEN`."""
from __future__ import annotations

from channels.db import database_sync_to_async
from ninja.security import HttpBearer, SessionAuth

from .models import ApiToken


class BearerToken(HttpBearer):
    def authenticate(self, request, token):
        user = ApiToken.authenticate(token)
        if user is not None:
            request.user = user
        return user


class Session(SessionAuth):
    """Django session (CSRF enforced on unsafe methods, as ninja does).

    The CSRF check only guards a logged-in session: without one there is nothing to forge, and the
    caller gets the documented 401 (JSON) rather than a 403 "CSRF check failed".
    """

    def __call__(self, request):
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)


API_AUTH = [BearerToken(), Session()]


def bearer_from_scope(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, raw = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and raw.strip():
                return raw.strip()
    return None


class BearerWebsocketMiddleware:
    """Lets headless websocket clients authenticate with a personal token instead of a cookie."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        raw = bearer_from_scope(scope)
        if raw:
            user = await database_sync_to_async(ApiToken.authenticate)(raw)
            if user is not None:
                scope = dict(scope, user=user)
        return await self.inner(scope, receive, send)
