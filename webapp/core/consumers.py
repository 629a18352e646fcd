from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer

from sandbox.boundedjson import JSONRefused, loads

from .groups import user_group

MAX_FRAME_CHARS = 65_536
"""Longest text frame a consumer reads (clients send small control messages such as a ping)."""
MAX_FRAME_DEPTH = 16
"""Deepest nesting of arrays and objects in a frame a consumer reads."""
BAD_FRAME = 4400
"""Close code: the frame is not JSON, nests too deeply, or is not an object."""
FRAME_TOO_LARGE = 4413
"""Close code: the frame is longer than MAX_FRAME_CHARS."""
BINARY_FRAME = 4415
"""Close code: a binary frame (messages are JSON text)."""


class JsonFrameConsumer(AsyncJsonWebsocketConsumer):
    """Base of the consumers that read JSON objects from their clients. A frame it cannot read (binary,
    longer than MAX_FRAME_CHARS, not JSON, nested deeper than MAX_FRAME_DEPTH, not an object) is
    answered ``{"type": "error", "code", "error"}`` and the socket closed with that 4xxx code and the
    reason; never a traceback and a 1011. The parse is bounded before it starts (sandbox.boundedjson).
    A ``{"type": "ping"}`` is answered ``{"type": "pong"}``; on disconnect the consumer leaves the group
    its ``connect`` joined as ``self.group``."""

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if text_data is None:
            await self.refuse_frame(BINARY_FRAME, "binary frames are not read: send JSON text such as "
                                                  '{"type": "ping"}')
            return
        try:
            content = loads(text_data, max_depth=MAX_FRAME_DEPTH, max_size=MAX_FRAME_CHARS)
        except JSONRefused as e:
            await self.refuse_frame(FRAME_TOO_LARGE if e.reason == "size" else BAD_FRAME, f"the frame {e}")
            return
        if not isinstance(content, dict):
            await self.refuse_frame(BAD_FRAME, 'the frame must be a JSON object such as {"type": "ping"}')
            return
        await self.receive_json(content, **kwargs)

    async def refuse_frame(self, code: int, reason: str) -> None:
        await self.send_json({"type": "error", "code": code, "error": reason})
        # A close frame carries at most 123 bytes of reason.
        await self.close(code=code, reason=reason.encode()[:123].decode(errors="ignore"))

    async def receive_json(self, content, **kwargs):
        if content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def disconnect(self, code):
        """Leave the channel group ``connect`` joined (``self.group``), if it got that far."""
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)


class UnroutedConsumer(AsyncWebsocketConsumer):
    """Any websocket path nothing serves (``/ws/nope/``, ``/ws/runs/abc/``): the handshake is refused
    (403), as an HTTP path nothing serves is a 404, instead of Channels' "No route found" error (a 500
    and a stack trace in the log)."""

    async def connect(self):
        await self.close()


class NotificationsConsumer(JsonFrameConsumer):
    """Per-user notifications (`user-<id>` group): validation finished, run state changes."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused with 403
            return
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def notify(self, event):
        await self.send_json(event["payload"])
