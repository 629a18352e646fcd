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


def refusal(path: str, method: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of the answer to an over-size body: JSON 413 under /api/, a redirect
    to the list page (which explains the limit) for the upload form, a short HTML 413 elsewhere."""
    from django.conf import settings
    from django.urls import reverse
    from django.utils.html import escape

    from .services import too_large_message

    message = too_large_message("the request body", settings.UPLOAD_MAX_BYTES)
    if path.startswith("/api/"):
        body = json.dumps({"detail": f"upload refused: {message}",
                           "errors": [{"line": 0, "field": "file", "message": message}]}).encode()
        return 413, [(b"content-type", b"application/json")], body
    upload_form = reverse("problems:list")
    if path == upload_form and method == "POST":
        return 303, [(b"location", f"{upload_form}?{TOO_LARGE_QUERY}".encode())], b""
    body = (f"<!doctype html><title>Request too large</title><h1>Request too large</h1>"
            f"<p>{escape(message)}.</p><p><a href=\"{upload_form}\">Back to the problem sets</a></p>").encode()
    return 413, [(b"content-type", b"text/html; charset=utf-8")], body


def _refuse(scope, send, limit: int):
    status, headers, body = refusal(scope.get("path", ""), scope.get("method", ""))
    return _respond(send, status, body, headers)


def refuse_oversize_bodies_in_daphne(limit: int) -> bool:
    """Refuse a declared over-size body in daphne itself, as soon as its headers arrive.

    daphne reads a whole request body (into a temporary file, then every chunk into the app's queue
    at once) before the ASGI app sees the request, so ``BodyLimitMiddleware`` alone still let a
    refused 60 MB upload cost the web process ~900 MB at its peak. Here twisted's ``gotLength`` (the
    headers are in, no body byte read) answers with ``refusal`` and closes the connection; the body
    is never stored and the app never runs. Bodies without a length (chunked) are still counted by
    the middleware. -> whether daphne is there to be limited.
    """
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:
        return False
    WebRequest.crucible_body_limit = limit
    if getattr(WebRequest, "crucible_limited", False):
        return True
    original_got_length, original_process = WebRequest.gotLength, WebRequest.process

    def gotLength(self, length):  # noqa: N802 (twisted's name)
        if length is not None and length > WebRequest.crucible_body_limit:
            self.crucible_refused = True
            self.content = _Discard()
            channel = self.channel
            path = (getattr(channel, "_path", b"") or b"").split(b"?", 1)[0].decode("latin-1")
            method = (getattr(channel, "_command", b"") or b"").decode("latin-1")
            status, headers, body = refusal(path, method)
            head = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}".encode()]
            head += [name + b": " + value for name, value in headers]
            head += [b"content-length: " + str(len(body)).encode(), b"connection: close"]
            channel.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
            channel.transport.loseConnection()
            return None
        return original_got_length(self, length)

    def process(self):
        if getattr(self, "crucible_refused", False):
            return None
        return original_process(self)

    WebRequest.gotLength, WebRequest.process = gotLength, process
    WebRequest.crucible_limited = True
    return True


_REASONS = {303: "See Other", 413: "Payload Too Large"}


class _Discard:
    """Where the body of a refused request goes: nowhere."""

    def write(self, data: bytes) -> None:
        pass

    def seek(self, *args) -> int:
        return 0

    def read(self, *args) -> bytes:
        return b""

    def close(self) -> None:
        pass

    closed = False


async def _respond(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    # `connection: close`: the unread rest of the body must not be taken for the next request.
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
