"""Websockets through the real Redis channel layer, and a real Celery worker reporting back through it."""
import asyncio
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from webapp.accounts.models import ApiToken
from webapp.asgi import application

from tests.factories import make_user

ORIGIN = (b"origin", b"http://127.0.0.1")


def make_token(username="wsuser"):
    user = make_user(username, password="ws-password-1")
    return user, ApiToken.issue(user, "test")[1]


@pytest.mark.django_db(transaction=True)
async def test_anonymous_websocket_handshake_is_refused():
    communicator = WebsocketCommunicator(application, "/ws/notifications/", headers=[ORIGIN])
    connected, code = await communicator.connect(timeout=10)  # default 1 s: too short on a loaded machine
    assert not connected
    assert code == 403 or code is None or code == 1000


@pytest.mark.django_db(transaction=True)
async def test_websocket_round_trip_survives_more_than_five_idle_seconds():
    user, token = await database_sync_to_async(make_token)()
    communicator = WebsocketCommunicator(application, "/ws/notifications/",
                                         headers=[ORIGIN, (b"authorization", f"Bearer {token}".encode())])
    connected, _ = await communicator.connect(timeout=10)  # default 1 s: too short on a loaded machine
    assert connected
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from(timeout=5) == {"type": "pong"}
    # redis-py 8's default 5 s socket timeout used to drop idle layer connections (channels_redis#422).
    await asyncio.sleep(6.5)
    assert await communicator.receive_nothing(timeout=0.1)
    await get_channel_layer().group_send(f"user-{user.pk}", {"type": "notify", "payload": {"hello": "after idle"}})
    assert await communicator.receive_json_from(timeout=5) == {"hello": "after idle"}
    await communicator.disconnect()


@pytest.mark.e2e
def test_a_real_worker_process_reports_back_through_the_channel_layer(celery_worker):
    from asgiref.sync import async_to_sync

    from webapp.core.tasks import ping

    layer = get_channel_layer()
    group = f"test-{uuid.uuid4().hex}"
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    nonce = uuid.uuid4().hex
    ping.delay(group, {"nonce": nonce})

    async def receive():
        return await asyncio.wait_for(layer.receive(channel), timeout=30)

    message = async_to_sync(receive)()
    assert message == {"type": "notify", "payload": {"nonce": nonce}}
