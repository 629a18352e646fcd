from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer

from .groups import user_group


class UnroutedConsumer(AsyncWebsocketConsumer):
    """Any websocket path nothing serves (``/ws/nope/``, ``/ws/runs/abc/``): the handshake is refused
    (403), as an HTTP path nothing serves is a 404, instead of Channels' "No route found" error (a 500
    and a stack trace in the log)."""

    async def connect(self):
        await self.close()


class NotificationsConsumer(AsyncJsonWebsocketConsumer):
    """Per-user notifications (`user-<id>` group): validation finished, run state changes."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused with 403
            return
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def notify(self, event):
        await self.send_json(event["payload"])
