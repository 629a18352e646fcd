"""Every websocket route answers a frame it cannot read (not JSON, nested too deeply, too large, binary,
not an object) with an error message and a 4xxx close code, never a traceback; a good frame still works."""
import json
import logging

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from webapp.asgi import application
from webapp.core.consumers import BAD_FRAME, BINARY_FRAME, FRAME_TOO_LARGE, MAX_FRAME_CHARS, MAX_FRAME_DEPTH

from .conftest import ORIGIN, setup_run, token_header

FRAMES = {  # name: (text or bytes, close code expected)
    "not JSON": ("hello {", BAD_FRAME),
    "empty": ("", BAD_FRAME),
    "30,000 deep": ("[" * 30_000 + "]" * 30_000, BAD_FRAME),
    "50,000 deep": ("[" * 50_000 + "]" * 50_000, FRAME_TOO_LARGE),  # longer than the frame limit too
    "just too deep": ('{"type": ' + "[" * MAX_FRAME_DEPTH + "]" * MAX_FRAME_DEPTH + "}", BAD_FRAME),
    "huge": (json.dumps({"type": "ping", "pad": "x" * 1_000_000}), FRAME_TOO_LARGE),
    "binary": (b"\x00\x01binary", BINARY_FRAME),
    "empty binary": (b"", BINARY_FRAME),
    "not an object": ("[1, 2, 3]", BAD_FRAME),
    "a huge integer": ("9" * 5000, BAD_FRAME),
}


async def open_socket(route: str, username: str = "wsowner"):
    _, run, token = await sync_to_async(setup_run)(username)
    path = "/ws/notifications/" if route == "notifications" else f"/ws/runs/{run.pk}/"
    communicator = WebsocketCommunicator(application, path, headers=[ORIGIN, token_header(token)])
    connected, _ = await communicator.connect(timeout=10)  # default 1 s: too short on a loaded machine
    assert connected
    return communicator


async def ping(communicator) -> None:
    """A ping answered with a pong (a run's replay messages before it are skipped)."""
    await communicator.send_json_to({"type": "ping"})
    for _ in range(50):
        message = await communicator.receive_json_from(timeout=5)
        if message == {"type": "pong"}:
            return
    raise AssertionError("no pong")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("route", ["runs", "notifications"])
@pytest.mark.parametrize("frame", list(FRAMES))
async def test_a_frame_the_consumer_cannot_read_is_refused_with_a_4xxx_close_and_no_traceback(route, frame, caplog):
    data, code = FRAMES[frame]
    communicator = await open_socket(route)
    await ping(communicator)
    with caplog.at_level(logging.WARNING):
        # As the server hands a frame on (send_to refuses empty ones).
        key = "bytes" if isinstance(data, bytes) else "text"
        await communicator.send_input({"type": "websocket.receive", key: data})
        error = await communicator.receive_json_from(timeout=5)
        closed = await communicator.receive_output(timeout=5)
        await communicator.wait(timeout=5)
    assert error["type"] == "error" and error["code"] == code and error["error"]
    assert closed["type"] == "websocket.close" and closed["code"] == code
    assert 0 < len(closed["reason"].encode()) <= 123  # what a close frame can carry
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("route", ["runs", "notifications"])
async def test_the_refusals_name_the_limits(route):
    communicator = await open_socket(route)
    await communicator.send_to(text_data="[" * 30_000 + "]" * 30_000)
    assert f"{MAX_FRAME_DEPTH} levels" in (await communicator.receive_json_from(timeout=5))["error"]
    communicator = await open_socket(route, "wsowner2")
    await communicator.send_to(text_data=" " * (MAX_FRAME_CHARS + 1))
    assert str(MAX_FRAME_CHARS) in (await communicator.receive_json_from(timeout=5))["error"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("route", ["runs", "notifications"])
async def test_an_object_of_an_unknown_type_is_ignored_and_the_socket_stays_open(route):
    communicator = await open_socket(route)
    await communicator.send_json_to({"type": "something-newer", "x": [1, {"y": 2}]})
    await ping(communicator)
    await communicator.disconnect()
