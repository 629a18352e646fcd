"""``RUN_DIR/events.jsonl``: the run's public record (docs/design.md "Training run events").

One JSON object per line, appended and flushed as each event happens, so the web app can follow the
file while the run is alive. Every event has ``event`` and ``time`` (Unix seconds). Kinds and fields:

- ``start``: ``config`` (the run config as a dict), ``model``, ``steps`` (``train.steps``), ``runtime``
  (library versions, device, kernels, engine); on resume also ``resumed_from`` (step); with a
  difficulty filter ``dropped`` ({unsolved, solved}).
- ``step``: ``step``, ``metrics`` ({name: number}).
- ``problem``: ``step``, ``problem_id``, ``pass_rate``, ``zero_variance`` (extension), ``candidates``
  ([{``code``, ``reward``, ``rewards``, ``result``}, ...]); when groups can be left out of the update
  (``sampling.dynamic``, ``ppo.drop_zero_variance_groups``) also ``used`` and, for a group left out,
  ``set_aside`` (``zero_variance`` | ``surplus``); with ``sampling.dynamic`` also ``round`` (1-based).
- ``eval``: ``step``, ``split``, ``pass@1``, ``pass@k`` ({"k": value}), ``per_problem`` (extension:
  {problem_id: {``n``, ``c``, ``pass@1``, ``candidates``}}, ``candidates`` being the problem's samples
  in the shape of a ``problem`` event's).
- ``checkpoint``: ``step``, ``path`` (relative to RUN_DIR), ``kind`` (adapter | merged | full).
- ``done``: ``status`` (succeeded | failed | cancelled), ``error``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, TextIO

EVENT_KINDS = ("start", "step", "problem", "eval", "checkpoint", "done")
DONE_STATUSES = ("succeeded", "failed", "cancelled")
CHECKPOINT_KINDS = ("adapter", "merged", "full")


class EventWriter:
    """Appends events to ``events.jsonl``; only the main process of a multi-GPU run should write."""

    def __init__(self, path: str | Path, *, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled
        self._file: TextIO | None = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> dict:
        """Write one event (``time`` added) and flush it to the OS; returns the event dict."""
        if event not in EVENT_KINDS:
            raise ValueError(f"unknown event {event!r}; valid events: {', '.join(EVENT_KINDS)}")
        record = {"event": event, **fields, "time": time.time()}
        if self._file is not None:
            self._file.write(json.dumps(_json_safe(record), ensure_ascii=False, allow_nan=False) + "\n")
            self._file.flush()
        return record

    def start(self, config: dict, model: str, **extra: Any) -> dict:
        return self.emit("start", config=config, model=model, **extra)

    def step(self, step: int, metrics: dict[str, float]) -> dict:
        return self.emit("step", step=step, metrics=metrics)

    def problem(self, step: int, problem_id: str, pass_rate: float, candidates: list[dict], **extra: Any) -> dict:
        return self.emit("problem", step=step, problem_id=problem_id, pass_rate=pass_rate,
                         candidates=candidates, **extra)

    def eval(self, step: int, split: str, pass_at_1: float, pass_at_k: dict[str, float], **extra: Any) -> dict:
        return self.emit("eval", step=step, split=split, **{"pass@1": pass_at_1, "pass@k": pass_at_k}, **extra)

    def checkpoint(self, step: int, path: str, kind: str) -> dict:
        if kind not in CHECKPOINT_KINDS:
            raise ValueError(f"unknown checkpoint kind {kind!r}; valid: {', '.join(CHECKPOINT_KINDS)}")
        return self.emit("checkpoint", step=step, path=path, kind=kind)

    def done(self, status: str, error: str | None = None) -> dict:
        if status not in DONE_STATUSES:
            raise ValueError(f"unknown done status {status!r}; valid: {', '.join(DONE_STATUSES)}")
        record = self.emit("done", status=status, error=error)
        if self._file is not None:
            os.fsync(self._file.fileno())  # the last word of a run must survive a crash of the host
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_events(path: str | Path) -> list[dict]:
    """All events of an ``events.jsonl`` (a torn last line, from a crash mid-write, is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _json_safe(value: Any) -> Any:
    """Plain JSON: NaN/inf become null (strict JSON has no NaN), tensors/numpy scalars become numbers."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):  # torch / numpy scalar
        return _json_safe(value.item())
    if hasattr(value, "to_dict"):
        return _json_safe(value.to_dict())
    if isinstance(value, Path):
        return str(value)
    return str(value)
