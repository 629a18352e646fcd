"""Live run events over ``/ws/runs/<id>/?since=STEP``: replay what the client missed, then stream.

The consumer joins ``run-<id>`` *before* reading the stored events, so nothing written during the
replay is lost. The replay is a task of its own that reads the stored log a page at a time
(``REPLAY_PAGE`` summarized events, see ``event_summary``) and sends each page before it reads the
next, so a connection holds one page however long the run; it is cancelled when the client goes.
Live events that arrive meanwhile are held (at most ``HELD_MAX``; past that they are dropped and read
from the log instead, where they were stored before they were broadcast) and sent after the replay,
and the ``seq`` check drops the ones the replay already sent. A replayed ``step`` carries its
``mismatch_warning`` as a live one does, and a page's ``problem`` and ``eval`` events the per-problem
rows and sandbox-health counts as stored now (``page_read_models``). Messages are built by
``messages.run_message``, live and replayed alike. It never writes to the database.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import close_old_connections
from django.db.models import Max, Q, TextField
from django.db.models.functions import Cast

from webapp.core.consumers import JsonFrameConsumer
from webapp.core.groups import run_group

from . import queries
from .messages import run_message
from .models import Run, RunEvent

REPLAY_PAGE = 100
"""Stored events read per database query of a replay (what one connection holds at a time)."""
HELD_MAX = 1000
"""Live events held while a replay runs; past that the replay reads them from the log instead."""
SEND_SLICE = 20
"""Messages a replay sends before it lets the event loop serve others (HTTP requests, live events)."""
REPLAYS_SENDING = 1
"""Replays of one process that send a page at the same time; the others wait their turn. Twenty
replays sending at once kept the loop so busy that each HTTP request waited behind their pages."""
REPLAY_SHARE = 0.5
"""Most of the event loop's time that sending replay pages takes: after a page that took t seconds to
send, its sender keeps the turn idle for t * (1 - share) / share, which the loop spends on requests."""
_sending: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()


def _sending_turn() -> asyncio.Semaphore:
    """The process's turns to send (one semaphore per event loop: a semaphore belongs to one)."""
    loop = asyncio.get_running_loop()
    if loop not in _sending:
        _sending[loop] = asyncio.Semaphore(REPLAYS_SENDING)
    return _sending[loop]

log = logging.getLogger("crucible.runs")


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


def _read_page(run_id: int, after_seq: int, since: int | None) -> list[tuple[int, str, str]]:
    """``[(seq, kind, payload as JSON text)]``: the text as the database holds it, never decoded here
    (a replay of a long run is mostly passing stored text on; decoding and encoding each event again
    was most of the process's time)."""
    close_old_connections()
    try:
        qs = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq)
        if since is not None:
            qs = qs.filter(Q(step__isnull=True) | Q(step__gt=since))
        qs = qs.annotate(text=Cast("payload", TextField()))
        return list(qs.order_by("seq").values_list("seq", "kind", "text")[:REPLAY_PAGE])
    finally:
        close_old_connections()


def replay_message(run_id: int, seq: int, kind: str, text: str, config: dict, extras: dict | None = None) -> str:
    """The websocket message of a stored event, as ``run_message`` builds a live one; ``extras``: the read
    models ``page_read_models`` attached to it."""
    return json.dumps(run_message(run_id, seq, json.loads(text), config, extras))


def page_read_models(run_id: int, page: list[tuple[int, str, str]]) -> dict[int, dict]:
    """``{seq: extras}`` for a replayed page: the per-problem table's rows and the sandbox-health counts
    as they are stored now, as live ``problem`` and ``eval`` messages carry them (``queries.event_read_models``).
    Each row goes once, on the last event of the page that names its problem, and the counts on the
    page's last ``problem`` event: what the page holds is current, so earlier copies would only be
    overwritten. Newer than the event they ride on at most by events that follow it, which bring theirs."""
    mentions: dict[str, tuple[int, str]] = {}  # problem_id -> (seq, kind) of its last event in the page
    last_problem = None
    for seq, kind, text in page:
        if kind not in ("problem", "eval") or (kind == "eval" and '"per_problem"' not in text):
            continue
        try:
            payload = json.loads(text)
        except ValueError:
            continue
        if kind == "problem":
            last_problem = seq
            ids = [payload.get("problem_id")]
        else:
            ids = list(payload.get("per_problem") or ()) if isinstance(payload.get("per_problem"), dict) else []
        for problem_id in ids:
            if isinstance(problem_id, str):
                mentions[problem_id] = (seq, kind)
    if not mentions and last_problem is None:
        return {}
    close_old_connections()
    try:
        rows = {row["problem_id"]: row for row in queries.problems(run_id, mentions)} if mentions else {}
        out: dict[int, dict] = {}
        for problem_id, (seq, kind) in mentions.items():
            if problem_id not in rows:
                continue
            if kind == "problem":
                out.setdefault(seq, {})["problem_row"] = rows[problem_id]
            else:
                out.setdefault(seq, {}).setdefault("problem_rows", []).append(rows[problem_id])
        if last_problem is not None:
            out.setdefault(last_problem, {})["health"] = queries.sandbox_health(run_id)
        return out
    finally:
        close_old_connections()


# Not the thread Django's request handlers share (thread_sensitive=False): twenty replays paging through
# long runs must not queue the API's requests behind their reads.
_replay_page = sync_to_async(_read_page, thread_sensitive=False)
_page_read_models = sync_to_async(page_read_models, thread_sensitive=False)


class RunConsumer(JsonFrameConsumer):
    async def connect(self):
        user = self.scope.get("user")
        self.last_seq = -1
        self.replay: asyncio.Task | None = None
        self.held: list[dict] = []
        self.held_dropped = False
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
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.replay = asyncio.ensure_future(self._replay(since, after))

    async def _replay(self, since: int | None, after: int | None) -> None:
        try:
            cursor = await _replay_start(self.run_id, since, after)
            if after is not None:
                since = None
            while True:
                cursor = await self._replay_from(cursor, since)
                if not self.held_dropped:
                    break
                self.held_dropped, since = False, None  # what was dropped is in the log after `cursor`
            while self.held:
                await self._forward(self.held.pop(0))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("replay of run %s failed", self.run_id)
            await self.close(code=1011)
        finally:
            self.replay = None

    async def _replay_from(self, cursor: int, since: int | None) -> int:
        """Send every stored event after seq ``cursor`` (of a step after ``since``); the last seq read."""
        while True:
            page = await _replay_page(self.run_id, cursor, since)
            read_models = await _page_read_models(self.run_id, page)
            async with _sending_turn():
                started = time.monotonic()
                for i, (seq, kind, text) in enumerate(page):
                    if seq > self.last_seq:
                        await self.send(text_data=replay_message(self.run_id, seq, kind, text, self.config,
                                                                 read_models.get(seq)))
                        self.last_seq = seq
                    if i % SEND_SLICE == SEND_SLICE - 1:
                        await asyncio.sleep(0)
                await asyncio.sleep((time.monotonic() - started) * (1 - REPLAY_SHARE) / REPLAY_SHARE)
            if page:
                cursor = page[-1][0]
            if len(page) < REPLAY_PAGE:
                break
        if self.last_seq < cursor:
            self.last_seq = cursor  # the client said it has everything up to here
        return cursor

    async def disconnect(self, code):
        if self.replay is not None:
            self.replay.cancel()  # the client is gone: nothing more is read or sent
        await super().disconnect(code)

    async def run_event(self, message):
        event = message["event"]
        if self.replay is not None:
            if isinstance(event.get("seq"), int) and len(self.held) >= HELD_MAX:
                self.held_dropped = True  # stored before it was sent: the replay reads it from the log
            else:
                self.held.append(event)  # a status message (never stored) is always kept
            return
        await self._forward(event)

    async def _forward(self, event: dict) -> None:
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return  # already sent by the replay
            self.last_seq = seq
        await self.send_json(event)
