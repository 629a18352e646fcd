"""The ASGI body guard: an over-size upload is refused before the app reads its body."""
import json

import pytest

from webapp.problems.uploads import BodyLimitMiddleware

MiB = 1 << 20


def http_scope(path: str, headers: list[tuple[bytes, bytes]], method: str = "POST") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
            "client": ["127.0.0.1", 5000], "server": ["127.0.0.1", 8000]}


class Body:
    """An ASGI `receive` that serves `chunks` chunks of `size` bytes and counts what it handed out."""

    def __init__(self, chunks: int, size: int = MiB):
        self.left, self.size, self.sent = chunks, size, 0

    async def __call__(self):
        if self.left == 0:
            return {"type": "http.disconnect"}
        self.left -= 1
        self.sent += self.size
        return {"type": "http.request", "body": b"x" * self.size, "more_body": self.left > 0}


async def call(app, scope, receive) -> tuple[int, dict, bytes]:
    messages = []

    async def send(message):
        messages.append(message)

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


@pytest.fixture
def application(settings):
    settings.UPLOAD_MAX_BYTES = 2 * MiB
    from webapp.asgi import application

    return application


async def never_called():
    raise AssertionError("the body was read")


async def test_a_huge_declared_api_upload_answers_json_413_without_reading_the_body(application):
    scope = http_scope("/api/problem-sets", [(b"content-length", str(60 * 2**30).encode()),
                                              (b"content-type", b"multipart/form-data; boundary=x")])
    status, headers, body = await call(application, scope, never_called)
    assert status == 413 and headers["content-type"] == "application/json"
    refused = json.loads(body)
    assert "larger than the upload limit of 2.0 MiB" in refused["detail"]
    assert refused["errors"][0]["field"] == "file" and "CRUCIBLE_UPLOAD_MAX_MB" in refused["errors"][0]["message"]


async def test_a_huge_upload_through_the_form_is_sent_back_to_the_form_which_explains_the_limit(application):
    scope = http_scope("/problem-sets/", [(b"content-length", str(61 * MiB).encode())])
    status, headers, _ = await call(application, scope, never_called)
    assert status == 303 and headers["location"] == "/problem-sets/?upload=too-large"


@pytest.mark.django_db
def test_the_upload_form_says_why_after_the_guard_sent_it_back(client_alice, settings):
    settings.UPLOAD_MAX_BYTES = 2 * MiB
    html = client_alice.get("/problem-sets/?upload=too-large").content.decode()
    assert "larger than the upload limit of 2.0 MiB" in html and "CRUCIBLE_UPLOAD_MAX_MB" in html


async def test_a_chunked_body_is_cut_off_at_the_limit_and_the_app_reads_no_more(application):
    body = Body(chunks=60)  # 60 MiB, no Content-Length
    status, _, _ = await call(application, http_scope("/api/problem-sets", []), body)
    assert status == 413
    assert body.sent <= 3 * MiB  # the limit (2 MiB and the multipart allowance) and the chunk past it


async def test_a_body_within_the_limit_reaches_the_app_whole():
    seen = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            seen.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guarded = BodyLimitMiddleware(app, limit=lambda: 3 * MiB)
    status, _, _ = await call(guarded, http_scope("/api/problem-sets", [(b"content-length", str(3 * MiB).encode())]),
                              Body(chunks=3))
    assert status == 201 and sum(seen) == 3 * MiB


async def test_an_oversize_body_to_any_other_page_gets_a_readable_413(application):
    scope = http_scope("/runs/new", [(b"content-length", str(100 * MiB).encode())])
    status, headers, body = await call(application, scope, never_called)
    assert status == 413 and headers["content-type"].startswith("text/html")
    assert b"Request too large" in body and b'href="/problem-sets/"' in body


def _raw_request(base_url: str, head: bytes, body_start: bytes = b"") -> bytes:
    import socket
    from urllib.parse import urlparse

    url = urlparse(base_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(head + body_start)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)  # times out (failing the test) if the server waits for the body
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.parametrize("path, status", [("/api/problem-sets", b"413"), ("/problem-sets/", b"303")])
def test_the_server_refuses_a_declared_huge_body_before_reading_it(live_server_url, path, status):
    # 10 GiB declared, a few bytes sent: daphne used to wait for (and store) the whole body first
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            f"Content-Length: {10 * 2**30}\r\n\r\n").encode()
    answer = _raw_request(live_server_url, head, b"--x\r\n")
    assert answer.split(b" ", 2)[1] == status, answer[:300]
    if status == b"413":
        assert b"CRUCIBLE_UPLOAD_MAX_MB" in answer
    else:
        assert b"upload=too-large" in answer
