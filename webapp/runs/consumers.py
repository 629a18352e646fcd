"""Live run events over ``/ws/runs/<id>/?since=STEP``: replay what the client missed, then stream.

The consumer joins ``run-<id>`` *before* reading the stored events, so nothing written during the
replay is lost; events that arrive through the group while the replay is still running are queued by
Channels and delivered afterwards, and the ``seq`` check drops the ones the replay already sent. A
replayed ``step`` carries its ``mismatch_warning`` as a live one does. It never writes to the database.
"""
from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db.models import Max, Q

from .models import Run, RunEvent
from .runtime import step_message_extras

REPLAY_BATCH = 500


def _int_param(query: dict, name: str) -> int | None:
    values = query.get(name)
    if not values or values[0] == "":
        return None
    return int(values[0])  # ValueError -> the handshake is refused


@database_sync_to_async
def _visible_config(user, run_id: int) -> dict | None:
    """The run's config when ``user`` may see the run, else None."""
    return Run.objects.visible_to(user).filter(pk=run_id).values_list("config", flat=True).first()


@database_sync_to_async
def _replay_start(run_id: int, since: int | None, after: int | None) -> int:
    """The seq after which to replay.

    ``after=SEQ`` (an extension the run page sends when it reconnects) is exact: every event after
    that line. Otherwise ``since=STEP`` as documented: the events after the last one of a step <= STEP.
    """
    if after is not None:
        return after
    if since is None:
        return -1
    cut = RunEvent.objects.filter(run_id=run_id, step__lte=since).aggregate(m=Max("seq"))["m"]
    return -1 if cut is None else cut


@database_sync_to_async
def _replay_batch(run_id: int, after_seq: int, since: int | None) -> list[tuple[int, dict]]:
    qs = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq)
    if since is not None:
        qs = qs.filter(Q(step__isnull=True) | Q(step__gt=since))
    return list(qs.order_by("seq").values_list("seq", "payload")[:REPLAY_BATCH])


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        self.last_seq = -1
        if user is None or not user.is_authenticated:
            await self.close()  # before accept: the handshake is refused (403)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        try:
            query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
            since, after = _int_param(query, "since"), _int_param(query, "after")
        except ValueError:
            await self.close()
            return
        self.config = await _visible_config(user, self.run_id)
        if self.config is None:
            await self.close()
            return
        self.group = f"run-{self.run_id}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        cursor = await _replay_start(self.run_id, since, after)
        while True:
            batch = await _replay_batch(self.run_id, cursor, since if after is None else None)
            for seq, payload in batch:
                await self.send_json({**payload, "run_id": self.run_id, "seq": seq,
                                      **step_message_extras(payload, self.config)})
                self.last_seq = seq
            if len(batch) < REPLAY_BATCH:
                break
            cursor = batch[-1][0]
        if self.last_seq < cursor:
            self.last_seq = cursor  # the client said it has everything up to here

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def run_event(self, message):
        event = message["event"]
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return  # already sent by the replay
            self.last_seq = seq
        await self.send_json(event)
