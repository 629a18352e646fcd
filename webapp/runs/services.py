"""Run workflows (zulip style: ``verb_noun()`` writes, then notifies).

- ``create_run``: merge the user's config over the training defaults, validate it with
  ``training.config`` (a ``ConfigError`` names the dotted field) and the model name with ``model_refs``,
  write the run dir (``run.yaml`` with the resolved model, the run's own ``problems.jsonl``), enqueue
  the supervisor task after the commit (a failed publish leaves the run queued; the ``RUN_JOB``
  sweep, run by beat and when a worker starts, publishes it again). The run's stored config keeps the
  model name the user gave.
- ``cancel_run`` / ``resume_run``: status changes; resume re-enqueues with ``--resume``.
- ``ingest_event``: store one line of ``events.jsonl`` (idempotent by its line number ``seq``), update
  the read models and broadcast it to the channel group ``run-<id>`` as ``messages.run_message`` builds
  it (a ``step`` with its ``mismatch_warning``; a ``problem`` or ``eval`` with the table rows it changed,
  see ``queries.event_read_models``), the one builder of live and replayed messages. Each line is read with training's
  ``parse_event`` and stored as its definition writes it (old names read as the new ones); a line that
  does not parse is stored as written and changes no read model. The stored and broadcast copy of a
  ``problem`` or ``eval`` event is its summary (``event_summary``): candidates live in their rows.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from training import events as run_events
from training.config import ConfigError, config_from_dict, save_config

from webapp.core.groups import run_group, user_group
from webapp.core.jobs import DurableJob, Pending
from webapp.core.jsonsafe import db_safe
from webapp.core.outage import OutageLog
from webapp.core.text import name_problem
from webapp.problems.services import write_problems_jsonl

from . import queries
from .checkpoints import STATE_DIR, resolve_checkpoint_dir
from .config import merge_config, trainer_config, validate_config
from .difficulty import check_run_filter, resolve_run_probe
from .event_summary import summarize
from .model_refs import check_hub_model
from .models import FINISHED_STATUSES, Candidate, Checkpoint, Eval, ProblemStat, Run, RunEvent, StepMetric
from .messages import run_message

log = logging.getLogger("crucible.runs")
channel_layer_outage = OutageLog(log, "the channel layer (Redis)")


# ---- lifecycle ------------------------------------------------------------------------------------


def create_run(owner, name: str, problem_set, config: dict) -> Run:
    """Validate, create the run and its directory, and enqueue its supervisor (after commit).

    Raises ``ConfigError`` naming the field (``name``, ``problem_set`` or a dotted config key).
    """
    name = (name or "").strip()
    problem = name_problem(name)
    if problem:
        raise ConfigError("name", problem)
    if problem_set is None:
        raise ConfigError("problem_set", "is required: choose one of your problem sets")
    if not problem_set.problems.filter(split="train", excluded=False).exists():
        raise ConfigError("problem_set", f"'{problem_set.name}' has no problems in the train split (excluded "
                                         "ones do not count); upload problems with split: train")
    full = validate_config(config, owner)
    check_hub_model(full["model"]["name_or_path"])
    probe = resolve_run_probe(full["difficulty"], problem_set)
    if probe is not None:
        full["difficulty"]["probe"] = probe.reference
        check_run_filter(probe, problem_set, full["difficulty"])

    with transaction.atomic():
        run = Run.objects.create(owner=owner, name=name, problem_set=problem_set, config=full,
                                 steps=full["train"]["steps"], celery_task_id=uuid.uuid4().hex)
        run_dir = Path(settings.RUNS_DIR) / str(run.pk)
        run_dir.mkdir(parents=True, exist_ok=True)
        problems_path = write_problems_jsonl(problem_set, run_dir / "problems.jsonl")
        full["problems"] = str(Path(problems_path).resolve())
        trainer = trainer_config(full, owner)
        if probe is not None:  # the run's own copy, like its problems: the set (and its probes) may go
            copied = shutil.copyfile(probe.output_file, run_dir / "probe.jsonl")
            trainer = merge_config(trainer, {"difficulty": {"probe": str(Path(copied).resolve())}})
        save_config(config_from_dict(trainer), run_dir / "run.yaml")
        run.set_up(config=full, run_dir=str(run_dir.resolve()))
        _enqueue_on_commit(run)
    notify_status(run)
    return run


def _enqueue_on_commit(run: Run) -> None:
    """Publish the run's supervisor once the queued row is committed; ``run.enqueued`` says how it went
    (None until the commit, then True, or False when the broker was down and the sweep will publish)."""
    run.enqueued = None

    def publish() -> None:
        run.enqueued = enqueue_run(run)

    transaction.on_commit(publish)


def _queued_runs() -> Iterable[Pending]:
    for pk, task_id in Run.objects.filter(status=Run.Status.QUEUED).order_by("queued", "pk").values_list(
            "pk", "celery_task_id"):
        yield Pending(pk, task_id, (pk,))


RUN_JOB = DurableJob("runs.supervise", pending=_queued_runs, what="the supervisor again for queued runs")
"""A queued run (its task id is new at each queueing: a resume is a new task). A supervisor task published
twice is harmless: it claims the run under a row lock and the second copy finds it no longer queued."""


def enqueue_run(run: Run) -> bool:
    """Publish the supervisor task of a queued run; False (logged) when the broker is unreachable."""
    return RUN_JOB.publish(run.pk, task_id=run.celery_task_id)


def cancel_run(run: Run) -> str:
    """Cooperative stop (the supervisor sends SIGTERM; the trainer checkpoints and writes done)."""
    status = run.request_cancel()
    notify_status(run)
    return status


def resume_run(run: Run, *, automatic: bool = False) -> Run:
    """failed | cancelled -> queued; the trainer is started with ``--resume`` (last checkpoint).
    ``automatic``: the resume of a run a worker shutdown stopped (see ``Run.requeue``)."""
    run.requeue(automatic=automatic)
    _enqueue_on_commit(run)
    notify_status(run)
    return run


def finish_run(run: Run, status: str, error: str = "") -> bool:
    changed = run.finish(status, error)
    if changed:
        notify_status(run)
    return changed


# ---- events ---------------------------------------------------------------------------------------


def event_step(event: dict) -> int | None:
    step = event.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def ingest_event(run: Run, event: dict, *, seq: int, offset: int | None = None, apply_done: bool = True,
                 broadcast: bool = True) -> bool:
    """Store line ``seq`` of the run's events.jsonl and broadcast it; False if it was stored before.

    ``offset`` (bytes of the file consumed through this line) is saved with it so a restarted
    follower continues where this one stopped. ``apply_done=False`` records a ``done`` event
    without changing the run's status (catching up on a file whose trainer is gone).
    """
    event = db_safe(event)  # model-written code and program output may hold NUL characters
    kind = str(event.get("event", ""))
    parsed = None
    if kind in run_events.EVENT_KINDS:
        try:
            parsed = run_events.parse_event(event)
        except run_events.EventError as exc:
            log.warning("run %s: line %s of events.jsonl is stored as written, not applied: %s", run.pk, seq, exc)
        else:
            event = parsed.to_dict()  # as its definition writes it: old names read as the new ones
    if kind == "start":
        event = public_start(run, event)
    step = event_step(event)
    summary = summarize(event)
    try:
        with transaction.atomic():
            if RunEvent.objects.filter(run=run, seq=seq).exists():
                created = False
            else:
                RunEvent.objects.create(run=run, seq=seq, kind=kind[:20], step=step, payload=summary)
                created = True
                if parsed is not None:
                    _apply(run, parsed)  # the whole event: candidates become their rows here
            run.record_line(seq=seq, offset=offset, step=step if created and kind == "step" else None)
    except IntegrityError:  # another follower stored the same line first
        return False
    if not created:
        return False
    if kind == "done" and apply_done:
        status = event.get("status")
        if status not in FINISHED_STATUSES:
            status, error = Run.Status.FAILED, f"trainer wrote done with unknown status {status!r}"
        else:
            error = event.get("error") or ""
        if status == Run.Status.FAILED and Run.objects.filter(pk=run.pk, status=Run.Status.CANCELLING).exists():
            # The user asked to stop; whatever the stop interrupted (a model load, a hub retry) is no failure.
            status, error = Run.Status.CANCELLED, f"cancelled; the trainer stopped with: {error}" if error else ""
        finish_run(run, status, error)
    if kind == "start" and run.status == Run.Status.RUNNING:
        notify_status(run)
    if kind == "warning" and event.get("condition"):  # a divergence warning: the `make run` terminal says it too
        log.warning("run #%s “%s”: divergence warning at step %s: %s", run.pk, run.name, event.get("step"),
                    event.get("message"))
    if broadcast:
        # The rows this event changed as stored just now (this run's events are ingested one at a time).
        read_models = queries.event_read_models(run, event) if parsed is not None else {}
        broadcast_event(run.pk, run_message(run.pk, seq, summary, run.config, read_models))
    return True


def public_start(run: Run, event: dict) -> dict:
    """A ``start`` event as its user may see it: the trainer writes the paths it was given (the model's
    directory, the run's problem file and probe copy under the data dir); the stored and broadcast copy
    names them as the run's config does (``models/tiny``, ``run:<id>/step-<n>``, ``probe:<id>``) and the
    problems by their set. The trainer's own events.jsonl keeps the paths."""
    public = run.config if isinstance(run.config, dict) else {}
    model = public.get("model") if isinstance(public.get("model"), dict) else {}
    config = dict(event["config"]) if isinstance(event.get("config"), dict) else {}
    if isinstance(config.get("model"), dict):
        config["model"] = {**config["model"], "name_or_path": model.get("name_or_path"),
                           "adapters": model.get("adapters", [])}
    if "problems" in config:
        config["problems"] = f"problem set {run.problem_set_id}"
    if isinstance(config.get("difficulty"), dict):
        difficulty = public.get("difficulty") if isinstance(public.get("difficulty"), dict) else {}
        config["difficulty"] = {**config["difficulty"], "probe": difficulty.get("probe")}
    return {**event, "config": config, "model": model.get("name_or_path")}


def _apply(run: Run, event: run_events.Event) -> None:
    """The read models an event changes (``start`` and ``done`` change the run itself, in ``ingest_event``)."""
    if isinstance(event, run_events.Step):
        StepMetric.objects.update_or_create(run=run, step=event.step, defaults={"metrics": event.metrics,
                                                                                "time": event.time})
    elif isinstance(event, run_events.Problem):
        _apply_problem(run, event)
    elif isinstance(event, run_events.Eval):
        Eval.objects.update_or_create(run=run, step=event.step, split=event.split, defaults={
            "pass_at_1": event.pass_at_1, "pass_at_1_turn1": event.pass_at_1_turn1,
            "pass_at_k": event.pass_at_k, "time": event.time})
        if event.per_problem is not None:
            _apply_eval_problems(run, event.step, event.split, event.per_problem)
    elif isinstance(event, run_events.Checkpoint):
        Checkpoint.objects.update_or_create(run=run, path=event.path, defaults={
            "step": event.step, "kind": event.kind, "size_bytes": directory_size(run, event.path)})


def _apply_eval_problems(run: Run, step: int, split: str, per_problem: dict) -> None:
    """Held-out problems join the per-problem table: their pass@1 at each evaluation is their history,
    so the first and last points are the before → after of that problem. The samples an entry lists
    (``candidates``) are stored as that evaluation's candidates (phase ``eval``)."""
    for problem_id, result in per_problem.items():
        if not isinstance(result, dict):
            continue
        if isinstance(result.get("candidates"), list):
            # A resumed run evaluates its resume step again: the newer samples replace the older.
            Candidate.objects.filter(run=run, phase=Candidate.Phase.EVAL, step=step,
                                     problem_id=str(problem_id)).delete()
            Candidate.objects.bulk_create(_candidate_rows(run, step, str(problem_id), result["candidates"],
                                                          Candidate.Phase.EVAL))
        if not isinstance(result.get("pass@1"), (int, float)):
            continue
        stat, _ = ProblemStat.objects.get_or_create(run=run, problem_id=str(problem_id), defaults={"split": split})
        stat.history = sorted([h for h in stat.history if h[0] != step] + [[step, float(result["pass@1"])]])
        stat.solve_rate = stat.history[-1][1]
        stat.last_step = max(stat.last_step, step)
        stat.split = split
        stat.solve_rate_turn1 = _number(result.get("pass@1/turn1"))
        stat.save(update_fields=["history", "solve_rate", "last_step", "split", "solve_rate_turn1"])


def _apply_problem(run: Run, event: run_events.Problem) -> None:
    """A step's group of one problem: its candidates' rows, and the problem's row (its solve rate at the
    step joins its history; ``zero_variance`` and ``solve_rate`` are the event's, which ``parse_event``
    derives for an old event that left them out, with training's tolerance)."""
    step, problem_id = event.step, event.problem_id
    # Left out of the update (dynamic sampling, ppo.drop_zero_variance_groups): the event says why.
    set_aside = "" if event.used is not False else (event.set_aside or "unused")[:20]
    # A resumed run repeats the steps after its last checkpoint: the newer record replaces the older.
    Candidate.objects.filter(run=run, phase=Candidate.Phase.TRAIN, step=step, problem_id=problem_id).delete()
    rows = _candidate_rows(run, step, problem_id, event.candidates, Candidate.Phase.TRAIN, set_aside=set_aside)
    Candidate.objects.bulk_create(rows)
    zero_variance, solve_rate = bool(event.zero_variance), event.solve_rate
    stat, _ = ProblemStat.objects.select_for_update().get_or_create(
        run=run, problem_id=problem_id, defaults={"split": problem_splits(run.run_dir).get(problem_id, "train")})
    history = [h for h in stat.history if h[0] != step] + [[step, solve_rate]]
    history.sort(key=lambda h: h[0])
    zv = [s for s in stat.zero_variance_steps if s != step] + ([step] if zero_variance else [])
    stat.history, stat.zero_variance_steps, stat.zero_variance_groups = history, sorted(zv), len(zv)
    stat.set_aside_steps = sorted([s for s in stat.set_aside_steps if s != step] + ([step] if set_aside else []))
    stat.solve_rate, stat.last_step = history[-1][1], history[-1][0]
    if stat.last_step == step:
        stat.solve_rate_turn1 = event.solve_rate_turn1
    stat.save()


def _candidate_rows(run: Run, step: int, problem_id: str, candidates: list, phase: str, *,
                    set_aside: str = "") -> list[Candidate]:
    """Rows for an event's candidates (``{code, reward, rewards, result, truncated, ...}`` each);
    ``set_aside``: why the group was left out of the update ("" when it was used)."""
    rows = []
    for index, c in enumerate(candidates):
        if not isinstance(c, dict):
            continue
        result = c.get("result") if isinstance(c.get("result"), dict) else {}
        status = str(result.get("status") or "")
        rows.append(Candidate(run=run, phase=phase, step=step, problem_id=problem_id, index=c.get("index", index),
                              code=str(c.get("code") or ""), reward=_number(c.get("reward")),
                              rewards=c.get("rewards") if isinstance(c.get("rewards"), dict) else {},
                              result=result, passed=status == "passed",
                              status=status[:20], truncated=c.get("truncated") is True,
                              overlong_penalty=_number(c.get("overlong_penalty")),
                              penalized_flags=_names(c.get("penalized_flags")), set_aside=set_aside,
                              turns=_turns(c.get("turns"))))
    return rows


TURN_KEYS = ("reply", "code", "feedback", "result", "reward", "rewards", "truncated", "flags")


def _turns(value) -> list[dict]:
    """A multi-turn candidate's turns as the trainer wrote them (only the documented keys); [] otherwise."""
    if not isinstance(value, list) or len(value) < 2:
        return []
    return [{k: t[k] for k in TURN_KEYS if k in t} for t in value if isinstance(t, dict)]


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _names(value) -> list[str]:
    """A list of short names from an event (``penalized_flags``); anything else is dropped."""
    return [str(v)[:100] for v in value if isinstance(v, str)] if isinstance(value, list) else []


@lru_cache(maxsize=64)
def problem_splits(run_dir: str) -> dict[str, str]:
    """{problem_id: split} from the run's own problems.jsonl (read once per process)."""
    out: dict[str, str] = {}
    try:
        with open(Path(run_dir) / "problems.jsonl", encoding="utf-8") as f:
            for line in f:
                try:
                    p = json.loads(line)
                except ValueError:
                    continue
                if isinstance(p, dict) and "id" in p:
                    out[str(p["id"])] = str(p.get("split") or "train")
    except OSError:
        pass
    return out


def directory_size(run: Run, relative: str) -> int:
    """Bytes of the regular files under run_dir/relative that a download holds (symlinks not followed,
    the trainer's resume state left out); 0 when missing."""
    try:
        root = resolve_checkpoint_dir(run, relative)
    except (FileNotFoundError, PermissionError):
        return 0
    total = 0
    for dirpath, dirs, files in os.walk(root):
        if dirpath == str(root) and STATE_DIR in dirs:
            dirs.remove(STATE_DIR)
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if not os.path.islink(os.path.join(dirpath, name)):
                total += st.st_size
    return total


# ---- broadcast ------------------------------------------------------------------------------------


def broadcast_event(run_id: int, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(run_group(run_id), {"type": "run.event", "event": message})
    except Exception:  # a missing live update must never lose the stored event
        channel_layer_outage.failed("broadcast of run %s event failed", run_id)
    else:
        channel_layer_outage.succeeded()


class StateLines:
    """The last state line logged for each run by this process. The supervisor's claim and the trainer's
    ``start`` event both notify ``running`` at step 0 (the page wants both: the second comes with the
    trainer's start); the ``make run`` terminal, which shows these lines, should say it once."""

    def __init__(self):
        self._last: dict[int, str] = {}
        self._lock = threading.Lock()  # a worker's runs are followed by threads

    def first_time(self, run_id: int, line: str) -> bool:
        with self._lock:
            new = self._last.get(run_id) != line
            self._last[run_id] = line
            return new


state_lines = StateLines()


def notify_status(run: Run) -> None:
    """Status change: to the run's page (an extra ``status`` message) and the owner's notifications."""
    run.refresh_from_db(fields=["status", "error", "step", "started", "finished"])
    # The `make run` terminal shows these lines (webapp.console.RUN_STATE) among warnings and errors.
    line = f"run #{run.pk} “{run.name}”: {run.status} at step {run.step}" + (
        f" ({run.error.splitlines()[0][:200]})" if run.error else "")
    if state_lines.first_time(run.pk, line):
        log.info("%s", line)
    payload = {"event": "status", "run_id": run.pk, "status": run.status, "error": run.error or None,
               "step": run.step, "time": timezone.now().timestamp()}
    broadcast_event(run.pk, payload)
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(run.owner_id), {"type": "notify", "payload": {
            "kind": "run", "id": run.pk, "name": run.name, "status": run.status}})
    except Exception:
        channel_layer_outage.failed("notification for run %s failed", run.pk)
