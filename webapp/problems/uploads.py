"""Bounds on request bodies: an ASGI guard that refuses an over-size body before the app reads it,
and an upload handler that stops reading a file past the upload limit (nothing big reaches disk)."""
from __future__ import annotations

import json

from django.core.files.uploadhandler import FileUploadHandler, StopUpload

MULTIPART_ALLOWANCE = 64 * 1024
"""Bytes a multipart body may carry beyond its file: boundaries, part headers, name, format, CSRF token."""
TOO_LARGE_QUERY = "upload=too-large"
"""Query string of the upload form's redirect after the guard refused a body (the page explains the limit)."""


class UploadLimitHandler(FileUploadHandler):
    """Put first in `request.upload_handlers`; sets `request.upload_too_large` when it stops a file.

    Usable per view (see problems.views) or for every request via settings.FILE_UPLOAD_HANDLERS.
    The rest of the request body is read and thrown away, so the browser still gets the page that
    explains the limit instead of a reset connection.
    """

    def __init__(self, request=None, max_bytes: int | None = None):
        from django.conf import settings

        super().__init__(request)
        self.max_bytes = settings.UPLOAD_MAX_BYTES if max_bytes is None else max_bytes
        self.received = 0
        request.upload_too_large = False

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.max_bytes:
            self.request.upload_too_large = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size):
        return None  # the next handler (memory or temporary file) builds the file


def body_limit() -> int:
    """The largest request body the app reads: an upload at the limit plus its multipart wrapping.

    Every path shares it: no request needs more than an upload does (JSON bodies are held to
    DATA_UPLOAD_MAX_MEMORY_SIZE by Django, with a JSON 400, once they are under this bound).
    """
    from django.conf import settings

    return settings.UPLOAD_MAX_BYTES + MULTIPART_ALLOWANCE


class BodyLimitMiddleware:
    """ASGI middleware: answer 413 to a body past `body_limit()` without reading it.

    A declared `Content-Length` past the limit is refused before the first `receive()`; a body
    without one (chunked) is counted as it arrives and cut off at the limit, so Django never spools
    or parses more than the limit. `/api/` answers JSON `{detail, errors}`; the upload form is sent
    back to the list page, which explains the limit; other pages get a short HTML page.
    """

    def __init__(self, app, limit=body_limit):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit()
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            return await _refuse(scope, send, limit)

        received = 0
        exceeded = False
        started = False

        async def counting_receive():
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django's body reader treats a disconnect as an aborted request and answers
                    # nothing; the refusal is sent below.
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counting_receive, tracking_send)
        if exceeded and not started:
            await _refuse(scope, send, limit)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _refuse(scope, send, limit: int):
    from django.conf import settings
    from django.urls import reverse
    from django.utils.html import escape

    from .services import too_large_message

    path = scope.get("path", "")
    message = too_large_message("the request body", settings.UPLOAD_MAX_BYTES)
    if path.startswith("/api/"):
        body = json.dumps({"detail": f"upload refused: {message}",
                           "errors": [{"line": 0, "field": "file", "message": message}]}).encode()
        return _respond(send, 413, body, [(b"content-type", b"application/json")])
    upload_form = reverse("problems:list")
    if path == upload_form and scope.get("method") == "POST":
        location = f"{upload_form}?{TOO_LARGE_QUERY}".encode()
        return _respond(send, 303, b"", [(b"location", location)])
    body = (f"<!doctype html><title>Request too large</title><h1>Request too large</h1>"
            f"<p>{escape(message)}.</p><p><a href=\"{upload_form}\">Back to the problem sets</a></p>").encode()
    return _respond(send, 413, body, [(b"content-type", b"text/html; charset=utf-8")])


async def _respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    # `connection: close`: the unread rest of the body must not be taken for the next request.
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
