from asgiref.sync import async_to_sync
from celery import shared_task
from channels.layers import get_channel_layer


@shared_task(name="core.ping")
def ping(group: str, payload: dict) -> None:
    """Send ``payload`` back to ``group`` through the channel layer: proves worker → Redis → websocket."""
    async_to_sync(get_channel_layer().group_send)(group, {"type": "notify", "payload": payload})
