"""The websocket message of a run event (docs/design.md, the websocket paragraph under "Web (webapp/)"),
built here alone: live (``services.ingest_event``) and replayed (``consumers.replay_message``) alike."""
from __future__ import annotations

from .runtime import step_message_extras


def run_message(run_id: int, seq: int, payload: dict, config: dict, read_models: dict | None = None) -> dict:
    """Line ``seq`` of run ``run_id``'s events as its browsers get it: the stored (summarized) event, plus
    ``run_id`` and ``seq``, a ``step``'s ``mismatch_warning`` (``config``: the run's) and the read models
    the event changed (``problem_row``, ``problem_rows``, ``health``: ``queries.event_read_models`` live,
    ``consumers.page_read_models`` on a replay)."""
    return {**payload, "run_id": run_id, "seq": seq, **step_message_extras(payload, config), **(read_models or {})}
