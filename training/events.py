"""``RUN_DIR/events.jsonl``: the run's public record (docs/design.md "Training run events").

One JSON object per line, appended and flushed as each event happens, so the web app can follow the
file while the run is alive. Every event has ``event`` (its kind) and ``time`` (Unix seconds).

Each kind is defined once, here, as a frozen dataclass whose fields are the event's (the wire name
where it is not an identifier: ``pass@1``): ``Start``, ``Step``, ``Problem``, ``Eval``,
``Checkpoint``, ``Done``, ``RunWarning`` (``warning``). A field without a default is required; an optional
one left ``None`` is not written. The trainer builds events with the constructors (``start_event``, ``step_event``, ...,
which check what the trainer must write, e.g. that every metric key is in ``training/metrics.py``) and
writes them with ``EventWriter.write``; readers turn a line back into its dataclass with
``parse_event`` (what the web app's ingest does), which accepts every event a stored run holds:

- old names are read as the new ones (a ``problem`` event's ``pass_rate`` is its ``solve_rate``,
  ``pass_rate_turn1`` its ``solve_rate_turn1``);
- what an old event left out and the trainer now writes is derived where it can be (a ``problem``
  event's ``solve_rate`` from its candidates' statuses, ``zero_variance`` from their rewards with
  ``ZERO_VARIANCE_ATOL``);
- keys no definition names are kept in ``extra`` and written back by ``to_dict``.

``to_dict`` gives the wire form: a ``problem`` event also carries ``pass_rate`` (= ``solve_rate``)
and ``pass_rate_turn1`` (= ``solve_rate_turn1``) for readers of the contract before the rename.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TextIO

from training import metrics as metric_registry
from training.metrics import ZERO_VARIANCE_ATOL

EVENT_KINDS = ("start", "step", "problem", "eval", "checkpoint", "done", "warning")
DONE_STATUSES = ("succeeded", "failed", "cancelled")
CHECKPOINT_KINDS = ("adapter", "merged", "full")
SET_ASIDE_REASONS = ("zero_variance", "surplus")
WARNING_CONDITIONS = ("kl", "loss", "flat_reward")
"""What a ``warning`` event can say crossed its bound (training/divergence.py ``CONDITIONS``)."""


class EventError(ValueError):
    """An event that does not follow its definition; the message names the kind and the field."""


def _wire(name: str, **meta: Any) -> dict:
    return {"wire": name, **meta}


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event has: ``time`` (Unix seconds; set by ``EventWriter.write``) and ``extra`` (keys no
    definition names, kept so that reading and writing an event back loses nothing)."""

    KIND: ClassVar[str] = ""
    ALIASES: ClassVar[dict[str, str]] = {}
    """old wire name -> field: written with the field's value for readers of the old contract, and read when
    the field's own name is absent (an event written before the rename)."""

    time: float | None = field(default=None, metadata={"type": "number"})
    extra: dict = field(default_factory=dict, metadata={"internal": True})

    def to_dict(self) -> dict:
        """The event as a JSON line holds it (``event`` first, ``time`` last)."""
        out: dict[str, Any] = {"event": self.KIND}
        for f in fields(self):
            if f.name == "time" or f.metadata.get("internal"):
                continue
            value = getattr(self, f.name)
            if value is None and _optional(f) and not f.metadata.get("always"):
                continue
            out[f.metadata.get("wire", f.name)] = value
        for alias, name in self.ALIASES.items():
            if getattr(self, name) is not None:
                out[alias] = getattr(self, name)
        out.update({k: v for k, v in self.extra.items() if k not in out and k != "time"})
        if self.time is not None:
            out["time"] = self.time
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Event":
        values: dict[str, Any] = {}
        known = {"event"} | set(cls.ALIASES)
        legacy = {name: old for old, name in cls.ALIASES.items()}
        for f in fields(cls):
            if f.metadata.get("internal"):
                continue
            wire = f.metadata.get("wire", f.name)
            known.add(wire)
            if wire in raw:
                value = raw[wire]
            elif f.name in legacy and legacy[f.name] in raw:
                value = raw[legacy[f.name]]
            elif _optional(f) or f.metadata.get("derived"):  # derived: filled in by _derive
                continue
            else:
                raise EventError(f"{cls.KIND} event: field {wire} is missing")
            where = f"{cls.KIND} event: field {wire}"
            values[f.name] = _checked(value, f.metadata.get("type", "any"), where,
                                      nullable=_optional(f) or f.metadata.get("nullable", False))
            choices = f.metadata.get("choices")
            if choices and values[f.name] is not None and values[f.name] not in choices:
                raise EventError(f"{where} is {value!r}; valid: {', '.join(choices)}")
        values["extra"] = {k: v for k, v in raw.items() if k not in known}
        return cls(**cls._derive(values, raw))

    @classmethod
    def _derive(cls, values: dict, raw: Mapping[str, Any]) -> dict:
        """Fill in what an old event left out; by default nothing."""
        return values


@dataclass(frozen=True, kw_only=True)
class Start(Event):
    """The run began (or resumed)."""

    KIND: ClassVar[str] = "start"
    config: dict = field(metadata={"type": "dict"})
    """The run config as a dict (``config_to_dict``)."""
    model: str | None = field(metadata={"type": "str", "nullable": True})
    """``model.name_or_path``."""
    steps: int | None = field(default=None, metadata={"type": "int"})
    """``train.steps`` (written by every trainer since the run page's ETA; absent in older runs)."""
    runtime: dict | None = field(default=None, metadata={"type": "dict"})
    """Library versions, device, dtype, architecture, kernels, warnings, ``engine`` (training/runtime.py), ``sampling``
    (training/static_decoding.describe: compiled, graphs, batch_buckets; lora: merged | adapter)."""
    resumed_from: int | None = field(default=None, metadata={"type": "int"})
    """A resumed run: the step of the checkpoint it continues from."""
    dropped: dict | None = field(default=None, metadata={"type": "dict"})
    """A difficulty filter applied: ``{unsolved: N, solved: M}`` train problems left out."""


@dataclass(frozen=True, kw_only=True)
class Step(Event):
    """A finished step's metrics (keys: training/metrics.py ``METRICS``; a non-finite value is null)."""

    KIND: ClassVar[str] = "step"
    step: int = field(metadata={"type": "int"})
    metrics: dict = field(metadata={"type": "metrics"})


@dataclass(frozen=True, kw_only=True)
class Problem(Event):
    """One problem's group of a step: every candidate, and what the group told the update."""

    KIND: ClassVar[str] = "problem"
    ALIASES: ClassVar[dict[str, str]] = {"pass_rate": "solve_rate", "pass_rate_turn1": "solve_rate_turn1"}
    step: int = field(metadata={"type": "int"})
    problem_id: str = field(metadata={"type": "str"})
    solve_rate: float = field(metadata={"type": "number", "derived": True})
    """Share of the problem's candidates that passed every test (wire alias ``pass_rate``)."""
    candidates: list = field(default_factory=list, metadata={"type": "list"})
    """``[{code, reward, rewards, result, truncated, overlong_penalty?, penalized_flags?, reward_normalized?,
    turns?}]`` (training/candidates.py ``event_dict``); the web app's stored copy is summarized."""
    zero_variance: bool | None = field(default=None, metadata={"type": "bool"})
    """Every candidate got the same reward (within ``ZERO_VARIANCE_ATOL``): no learning signal."""
    solve_rate_turn1: float | None = field(default=None, metadata={"type": "number"})
    """Multi-turn: share passing every test at their first turn (wire alias ``pass_rate_turn1``)."""
    used: bool | None = field(default=None, metadata={"type": "bool"})
    """When groups can be left out of the update: whether the update used this one."""
    set_aside: str | None = field(default=None, metadata={"type": "str"})
    """A group left out: why (``zero_variance`` | ``surplus``)."""
    round: int | None = field(default=None, metadata={"type": "int"})
    """``sampling.dynamic``: the round (1-based) that sampled the group."""
    summarized: bool | None = field(default=None, metadata={"type": "bool"})
    """The web app's stored copy: candidates cut to their summaries (webapp/runs/event_summary.py)."""

    @classmethod
    def _derive(cls, values: dict, raw: Mapping[str, Any]) -> dict:
        candidates = values.get("candidates") or []
        if "solve_rate" not in values:  # neither solve_rate nor pass_rate: count the candidates that passed
            if "candidates" not in raw:
                raise EventError("problem event: field solve_rate is missing (and no candidates to count)")
            values["solve_rate"] = (sum(_status(c) == "passed" for c in candidates) / len(candidates)
                                    if candidates else 0.0)
        if "zero_variance" not in values:
            values["zero_variance"] = zero_variance([c.get("reward") for c in candidates if isinstance(c, dict)])
        return values


@dataclass(frozen=True, kw_only=True)
class Eval(Event):
    """A held-out evaluation (step 0: before training)."""

    KIND: ClassVar[str] = "eval"
    step: int = field(metadata={"type": "int"})
    split: str = field(default="heldout", metadata={"type": "str"})
    pass_at_1: float | None = field(metadata=_wire("pass@1", type="number", nullable=True, always=True))
    pass_at_k: dict = field(default_factory=dict, metadata=_wire("pass@k", type="dict"))
    """``{"k": value}`` for each k up to ``train.eval_samples``."""
    pass_at_1_turn1: float | None = field(default=None, metadata=_wire("pass@1/turn1", type="number"))
    """Multi-turn: pass@1 of the first turns."""
    per_problem: dict | None = field(default=None, metadata={"type": "dict"})
    """``{problem_id: {n, c, pass@1, pass@1/turn1?, candidates?}}`` (candidates as a problem event's)."""


@dataclass(frozen=True, kw_only=True)
class Checkpoint(Event):
    KIND: ClassVar[str] = "checkpoint"
    step: int = field(metadata={"type": "int"})
    path: str = field(metadata={"type": "str"})
    """Relative to RUN_DIR; the Hugging Face files at its top level."""
    kind: str = field(default="adapter", metadata={"type": "str", "choices": CHECKPOINT_KINDS})


@dataclass(frozen=True, kw_only=True)
class Done(Event):
    """The run's last word."""

    KIND: ClassVar[str] = "done"
    status: str = field(metadata={"type": "str", "choices": DONE_STATUSES})
    error: str | None = field(default=None, metadata={"type": "str", "always": True})
    warnings: list | None = field(default=None, metadata={"type": "list"})
    """The run's divergence warnings (``warning`` events with a ``condition``), in order, as ``{source, condition, step,
    message}`` (absent: none, or a trainer from before them)."""


@dataclass(frozen=True, kw_only=True)
class RunWarning(Event):
    """Something went wrong that does not stop the run (an experiment tracker failed and was dropped; a divergence
    bound of the ``monitor`` section was passed: training/divergence.py, once per condition)."""

    KIND: ClassVar[str] = "warning"
    source: str = field(metadata={"type": "str"})
    """What it concerns, as a dotted config name where there is one (``tracking.wandb``, ``monitor.kl_max``)."""
    message: str = field(metadata={"type": "str"})
    step: int | None = field(default=None, metadata={"type": "int"})
    condition: str | None = field(default=None, metadata={"type": "str", "choices": WARNING_CONDITIONS})
    """A divergence warning: what crossed its bound (``kl`` | ``loss`` | ``flat_reward``)."""
    metric: str | None = field(default=None, metadata={"type": "str"})
    """A divergence warning: the metric (or sum) compared: ``kl``, ``loss/policy + loss/kl``, ``reward/mean``."""
    value: float | None = field(default=None, metadata={"type": "number"})
    """A divergence warning: its value (absent: not a finite number); ``flat_reward``: the flat steps' mean reward."""
    bound: float | None = field(default=None, metadata={"type": "number"})
    """A divergence warning: the ``monitor`` bound it crossed (``flat_reward``: the number of steps)."""
    since_step: int | None = field(default=None, metadata={"type": "int"})
    """A ``flat_reward`` warning: the first step of the flat stretch."""


EVENT_TYPES: dict[str, type[Event]] = {cls.KIND: cls for cls in (Start, Step, Problem, Eval, Checkpoint, Done,
                                                                  RunWarning)}
assert tuple(EVENT_TYPES) == EVENT_KINDS


def parse_event(raw: Mapping[str, Any]) -> Event:
    """The typed event of one line of ``events.jsonl`` (a dict); ``EventError`` names what is wrong.
    Old runs' events parse (see the module's docstring); unknown keys are kept in ``extra``."""
    if not isinstance(raw, Mapping):
        raise EventError(f"an event is a JSON object, got {type(raw).__name__}")
    kind = raw.get("event")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventError(f"unknown event {kind!r}; valid events: {', '.join(EVENT_KINDS)}")
    return cls.from_dict(raw)


def zero_variance(rewards: list) -> bool:
    """Whether a group's rewards carry no signal: at least two, all within ``ZERO_VARIANCE_ATOL``."""
    values = [float(r) for r in rewards if _is_number(r)]
    return len(values) > 1 and max(values) - min(values) <= ZERO_VARIANCE_ATOL


# ---- constructors: what the trainer writes ---------------------------------------------------------


def start_event(config: dict, model: str, *, steps: int, runtime: dict, resumed_from: int | None = None,
                dropped: dict | None = None) -> Start:
    return Start(config=config, model=model, steps=steps, runtime=runtime, resumed_from=resumed_from,
                 dropped=dropped)


def step_event(step: int, metrics: dict[str, float]) -> Step:
    """A step's metrics; a key missing from training/metrics.py ``METRICS`` raises."""
    metric_registry.check_keys(metrics)
    return Step(step=step, metrics=dict(metrics))


def problem_event(step: int, problem_id: str, solve_rate: float, candidates: list[dict], *,
                  zero_variance: bool, solve_rate_turn1: float | None = None, used: bool | None = None,
                  set_aside: str | None = None, round: int | None = None) -> Problem:
    if set_aside is not None and set_aside not in SET_ASIDE_REASONS:
        raise ValueError(f"unknown set_aside {set_aside!r}; valid: {', '.join(SET_ASIDE_REASONS)}")
    return Problem(step=step, problem_id=problem_id, solve_rate=solve_rate, candidates=candidates,
                   zero_variance=zero_variance, solve_rate_turn1=solve_rate_turn1, used=used, set_aside=set_aside,
                   round=round)


def eval_event(step: int, split: str, pass_at_1: float, pass_at_k: dict[str, float], *,
               pass_at_1_turn1: float | None = None, per_problem: dict | None = None) -> Eval:
    return Eval(step=step, split=split, pass_at_1=pass_at_1, pass_at_k=pass_at_k, pass_at_1_turn1=pass_at_1_turn1,
                per_problem=per_problem)


def checkpoint_event(step: int, path: str, kind: str) -> Checkpoint:
    if kind not in CHECKPOINT_KINDS:
        raise ValueError(f"unknown checkpoint kind {kind!r}; valid: {', '.join(CHECKPOINT_KINDS)}")
    return Checkpoint(step=step, path=path, kind=kind)


def done_event(status: str, error: str | None = None, *, warnings: list[dict] | None = None) -> Done:
    if status not in DONE_STATUSES:
        raise ValueError(f"unknown done status {status!r}; valid: {', '.join(DONE_STATUSES)}")
    return Done(status=status, error=error, warnings=warnings or None)


def warning_event(source: str, message: str, step: int | None = None, *, condition: str | None = None,
                  metric: str | None = None, value: float | None = None, bound: float | None = None,
                  since_step: int | None = None) -> RunWarning:
    if condition is not None and condition not in WARNING_CONDITIONS:
        raise ValueError(f"unknown warning condition {condition!r}; valid: {', '.join(WARNING_CONDITIONS)}")
    return RunWarning(source=source, message=message, step=step, condition=condition, metric=metric, value=value,
                      bound=bound, since_step=since_step)


def warning_summary(event: RunWarning | Mapping[str, Any]) -> dict:
    """A divergence warning as the ``done`` event lists it: ``{source, condition, step, message}``."""
    raw = event.to_dict() if isinstance(event, Event) else event
    return {k: raw.get(k) for k in ("source", "condition", "step", "message")}


# ---- the file ----------------------------------------------------------------------------------------


class EventWriter:
    """Appends events to ``events.jsonl``; only the main process of a multi-GPU run should write."""

    def __init__(self, path: str | Path, *, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled
        self._file: TextIO | None = None
        self.observers: list[Callable[[Event, dict], Any]] = []
        """Called with each event written and its line (``training.tracking.Tracker.observe``); they must not raise."""
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")

    def write(self, event: Event) -> dict:
        """Write one event (its ``time`` now) and flush it to the OS; returns the line's dict."""
        record = {**event.to_dict(), "time": time.time()}
        if self._file is not None:
            self._file.write(json.dumps(_json_safe(record), ensure_ascii=False, allow_nan=False) + "\n")
            self._file.flush()
            if isinstance(event, Done):
                os.fsync(self._file.fileno())  # the last word of a run must survive a crash of the host
        for observe in self.observers:
            observe(event, record)
        return record

    def emit(self, event: str, **fields: Any) -> dict:
        """Write an event given as its kind and wire fields (checked as ``parse_event`` checks a line)."""
        if event not in EVENT_KINDS:
            raise ValueError(f"unknown event {event!r}; valid events: {', '.join(EVENT_KINDS)}")
        return self.write(parse_event({"event": event, **fields}))

    def start(self, config: dict, model: str, **optional: Any) -> dict:
        return self.write(Start(config=config, model=model, **optional))

    def step(self, step: int, metrics: dict[str, float]) -> dict:
        return self.write(step_event(step, metrics))

    def problem(self, step: int, problem_id: str, solve_rate: float, candidates: list[dict], **extra: Any) -> dict:
        return self.write(problem_event(step, problem_id, solve_rate, candidates, **extra))

    def eval(self, step: int, split: str, pass_at_1: float, pass_at_k: dict[str, float], **extra: Any) -> dict:
        return self.write(eval_event(step, split, pass_at_1, pass_at_k, **extra))

    def checkpoint(self, step: int, path: str, kind: str) -> dict:
        return self.write(checkpoint_event(step, path, kind))

    def done(self, status: str, error: str | None = None) -> dict:
        return self.write(done_event(status, error))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_events(path: str | Path) -> list[dict]:
    """All events of an ``events.jsonl`` as written (a torn last line, from a crash mid-write, is
    skipped); ``parse_event`` turns one into its dataclass."""
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


# ---- helpers -----------------------------------------------------------------------------------------


def _optional(f: Any) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _status(candidate: Any) -> str | None:
    result = candidate.get("result") if isinstance(candidate, dict) else None
    return result.get("status") if isinstance(result, dict) else None


def _checked(value: Any, kind: str, where: str, *, nullable: bool) -> Any:
    """``value`` if it is a ``kind`` (a number becomes a float; an int stays an int); else EventError."""
    if value is None:
        if nullable:
            return None
        raise EventError(f"{where} is null")
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "number" and _is_number(value):
        return float(value)
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "dict" and isinstance(value, dict):
        return value
    if kind == "list" and isinstance(value, list):
        return value
    if kind == "metrics" and isinstance(value, dict):
        bad = [k for k, v in value.items() if not (v is None or _is_number(v))]
        if bad:
            raise EventError(f"{where}: {bad[0]} must be a number or null, got {value[bad[0]]!r}")
        return value
    if kind == "any":
        return value
    raise EventError(f"{where} must be {_KIND_NAMES.get(kind, kind)}, got {type(value).__name__} {value!r:.80}")


_KIND_NAMES = {"int": "an integer", "number": "a number", "str": "a string", "bool": "true or false",
               "dict": "an object", "list": "a list", "metrics": "an object of numbers"}


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
