"""Difficulty probes of problem sets (docs/design.md "Training CLI: tiny-model architectures and the
difficulty probe" and the API table's probe row, issue #11). The ``Probe`` row is the set's
(``webapp.problems.models``, a ``TrainerJob``); the job is this app's, on top of problems and runs
(it names models as the run form does), so that neither of those imports the other's way back.

- ``request_probe``: check the model the user named the way the run form does (``runs.model_refs``:
  a preset or installed model, a hub id, a checkpoint of the user's own run; never a path), bound
  the sample count, create the ``Probe`` and publish ``problems.probe`` (``PROBE_JOB``, routed to the
  ``gpu_short`` queue: a short-job worker, or an idle gpu worker, takes it, never behind a run) after
  the commit. While it waits, ``Probe.queue_place`` says where it stands (``webapp.core.queueing``).
- ``run_probe`` (the task's body, idempotent): a thin supervisor around ``python -m training probe``
  as a child process (``webapp.core.supervision``, as an evaluation's): the set written out as native
  JSONL and the output file under the set's data dir (``Probe.directory``),
  progress counted from the output lines as they appear, the owner's pages notified, the results
  stored when it ends.
"""
from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

from django.conf import settings
from django.db import transaction

from training.config import ConfigError, config_from_dict, save_config
from training.difficulty import ProbeFileError, read_probe

from webapp.core import queueing, supervision
from webapp.core.jobs import RowJob
from webapp.core.jsonsafe import db_safe
from webapp.core.refusals import Conflict
from webapp.problems.models import Probe, ProblemSet
from webapp.problems.services import notify_owner, write_problems_jsonl
from webapp.runs.config import default_config, merge_config
from webapp.runs.model_refs import check_model_field, checkpoint_reference, resolve_model
from webapp.runs.models import Run
from webapp.runs.presets import presets

log = logging.getLogger("crucible.problems")

POLL_S = 0.2
"""How often the supervisor looks at the child and its output."""
CHECK_S = 1.0
"""How often a running probe's supervisor records that it is alive (``Probe.heartbeat``) and looks for
its row (a deleted set's probe stops)."""
DEFAULT_SAMPLES = 8
KILL_GRACE_S = 10
"""A probe stopped (its set deleted, its supervisor failing) has this long to exit before it is killed."""


class ProbeConflict(Conflict):
    """The set cannot be probed now (a probe is under way, or its problems are not imported)."""


# ---- request ----------------------------------------------------------------------------------------


def sampling_config(model: str, user) -> dict:
    """The run-config sections a probe of ``model`` samples with: the run's own for a checkpoint
    (``run:<id>/step-<n>``), the preset's for a preset's model, else the web defaults. Only what the
    probe uses: ``sampling``, ``model.dtype`` and ``sandbox``."""
    config = default_config()
    checkpoint = checkpoint_reference(model)
    run = Run.objects.filter(pk=checkpoint[0], owner=user).first() if checkpoint else None
    if run is not None and run.config:
        config = merge_config(config, {k: v for k, v in run.config.items() if k in ("sampling", "model", "sandbox")})
    else:
        preset = next((p for p in presets() if p["config"].get("model", {}).get("name_or_path") == model), None)
        if preset is not None:
            config = merge_config(config, preset["config"])
    return {"sampling": config["sampling"], "model": {"dtype": config["model"]["dtype"]}, "sandbox": config["sandbox"]}


def check_probe_request(user, model, adapter, samples) -> tuple[str, str]:
    """``(model, adapter)`` cleaned, or ConfigError naming ``model``, ``adapter`` or ``samples``."""
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= settings.PROBE_MAX_SAMPLES:
        raise ConfigError("samples", f"must be a whole number from 1 to {settings.PROBE_MAX_SAMPLES} (this server's "
                                     f"limit, CRUCIBLE_PROBE_MAX_SAMPLES); got {samples!r}")
    model = check_model_field(model, user)
    adapter = adapter.strip() if isinstance(adapter, str) else ""
    if adapter:
        if checkpoint_reference(adapter) is None:
            raise ConfigError("adapter", "must be an adapter checkpoint of one of your runs as run:<id>/step-<n>, "
                                         "or empty")
        try:
            resolved = resolve_model(adapter, user)
        except ConfigError as exc:
            raise ConfigError("adapter", exc.message) from None
        if not resolved.adapters:
            raise ConfigError("adapter", f"{adapter} is a merged checkpoint, not an adapter: name it as the model")
    return model, adapter


def request_probe(problem_set: ProblemSet, user, model: str, adapter: str | None = None,
                  samples: int = DEFAULT_SAMPLES) -> Probe:
    """Queue a difficulty probe of ``problem_set`` by ``user``; ConfigError names a bad field,
    ProbeConflict says why the set cannot be probed now."""
    model, adapter = check_probe_request(user, model, adapter, samples)
    config = sampling_config(model, user)
    with transaction.atomic():
        locked = ProblemSet.objects.select_for_update().get(pk=problem_set.pk)
        if locked.import_status != ProblemSet.Import.DONE:
            raise ProbeConflict(f"problem set {locked.pk} has no problems to probe yet (import {locked.import_status})")
        busy = locked.probes.filter(status__in=(Probe.Status.PENDING, Probe.Status.RUNNING)).first()
        if busy is not None and busy.status == Probe.Status.RUNNING and not busy.worker_is_alive():
            busy = None if fail_lost_probe(busy) else busy  # its worker died: it never ends by itself
        if busy is not None:
            raise ProbeConflict(f"a difficulty probe of this set is already {busy.status} (probe {busy.pk}); "
                                "wait until it has finished")
        probe = Probe.objects.create(problem_set=locked, requested_by=user, model=model, adapter=adapter,
                                     samples=samples, config=config, total=locked.problem_count)
        probe.task_id = PROBE_JOB.task_id(probe.pk)
        probe.save(update_fields=["task_id"])
        transaction.on_commit(lambda: publish_probe(probe.pk))
    notify_probe(probe)
    log.info("problem set %s: probe %s of %s (%d samples) queued", problem_set.pk, probe.pk, model, samples)
    return probe


PROBE_JOB = RowJob("problems.probe", rows=lambda: Probe.objects.filter(status=Probe.Status.PENDING), prefix="probe",
                   what="the probe again for probes")
"""A probe pending; a second copy of its task finds the probe running (or finished) and leaves it."""


def publish_probe(probe_id: int) -> bool:
    """Publish ``problems.probe``; False (logged) when the broker is down: the sweep publishes it again."""
    return PROBE_JOB.publish_row(probe_id)


# ---- the job ----------------------------------------------------------------------------------------


def probe_command(probe: Probe, resolved, directory: Path) -> list[str]:
    """The probe's CLI command; with ``--threads`` (half the cores) when a run holds this host's CPU, so
    that the two do not oversubscribe it (``queueing.short_job_threads``)."""
    adapters = [*resolved.adapters]
    if probe.adapter:
        adapters += resolve_model(probe.adapter, probe.requested_by).adapters[-1:]
    threads = queueing.short_job_threads()
    return [sys.executable, "-m", "training", "probe", "--model", resolved.name_or_path,
            *[arg for a in adapters for arg in ("--adapter", a)],
            "--problems", str(directory / "problems.jsonl"), "--split", probe.split, "--samples", str(probe.samples),
            "--config", str(directory / "probe.yaml"), "--out", str(directory / "probe.jsonl"),
            *(["--threads", str(threads)] if threads else [])]


def run_probe(probe_id: int) -> Probe | None:
    """Do probe ``probe_id`` (the body of ``problems.probe``); idempotent. A finished probe is left as
    it is; a running one whose worker is alive too; one whose worker died is run again (its orphaned
    child, if it still runs, stopped first: the rerun starts in a clean directory)."""
    probe = Probe.objects.filter(pk=probe_id).first()
    if probe is None:
        return None
    return supervision.run_job(probe, _supervise, notify=notify_probe, fail=lambda p, error: _finish(p, error=error),
                               log=log)


def fail_lost_probe(probe: Probe) -> bool:
    """Fail running ``probe`` whose worker died (killed, host lost) -> whether this call failed it. Without
    this a lost probe stays `running`, and its set refuses every new probe. Its child, if it outlived
    the worker, is stopped."""
    if not probe.fail_lost("estimate again"):
        return False
    probe.refresh_from_db()
    notify_probe(probe)
    log.warning("probe %s of problem set %s lost its worker (%s)", probe.pk, probe.problem_set_id, probe.worker_label)
    return True


def fail_lost_probes() -> list[int]:
    """Fail every running probe whose worker died (beat, with the republishing) -> their ids."""
    return [probe.pk for probe in Probe.lost() if fail_lost_probe(probe)]


def _supervise(probe: Probe) -> Probe | None:
    try:
        resolved = resolve_model(probe.model, probe.requested_by)
        directory = probe.directory
        command = probe_command(probe, resolved, directory)
    except ConfigError as exc:  # the checkpoint is gone since the request
        return _finish(probe, error=f"model: {exc.message}")
    shutil.rmtree(directory, ignore_errors=True)  # a rerun starts clean
    directory.mkdir(parents=True)
    write_problems_jsonl(probe.problem_set, directory / "problems.jsonl")
    config = merge_config(default_config(), probe.config)
    config["model"]["name_or_path"], config["problems"] = resolved.name_or_path, str(directory / "problems.jsonl")
    save_config(config_from_dict(config), directory / "probe.yaml")
    out = directory / "probe.jsonl"
    gone = False

    def on_lines(lines) -> None:
        counted = sum(1 for _, line, _ in lines if "problem_id" in line)
        if counted and not gone:
            probe.record_progress(probe.done + counted)
            notify_probe(probe)

    def check() -> float | None:
        nonlocal gone
        gone = probe.beat() is None  # its set was deleted: stop, leave nothing
        return KILL_GRACE_S if gone else None

    rc = supervision.run_child(probe, command, directory=directory, out=out, on_lines=on_lines, check=check,
                               poll_s=POLL_S, check_s=CHECK_S, grace_s=KILL_GRACE_S)
    if gone:
        shutil.rmtree(directory, ignore_errors=True)
        return None
    if rc != 0:
        return _finish(probe, error=supervision.exit_error("the probe", rc, directory))
    try:
        report = read_probe(out)
    except ProbeFileError as exc:
        return _finish(probe, error=str(exc))
    # The CLI's summary names the model and adapters as the worker resolved them (server paths): the
    # stored one names them as the user did.
    summary = {**report.summary, "model": probe.model, "adapters": [probe.adapter] if probe.adapter else []}
    return _finish(probe, results=[r.to_dict() for r in report.results], summary=summary,
                   output_path=str(out.relative_to(settings.PROBLEM_SETS_DIR)))


def _finish(probe: Probe, *, error: str = "", results: list | None = None, summary: dict | None = None,
            output_path: str = "") -> Probe | None:
    fields = {} if error else {"results": db_safe(results), "summary": db_safe(summary), "output_path": output_path,
                               "done": len(results)}
    probe.finish(Probe.Status.FAILED if error else Probe.Status.DONE, db_safe(error), **fields)
    if not Probe.objects.filter(pk=probe.pk).exists():
        return None
    notify_probe(probe)
    log.info("probe %s of problem set %s: %s", probe.pk, probe.problem_set_id, probe.status)
    return probe


# ---- reads ------------------------------------------------------------------------------------------


def notify_probe(probe: Probe) -> None:
    """Tell the owner's open pages how far the probe got (group ``user-<id>``, /ws/notifications/)."""
    notify_owner(probe.problem_set, {"event": "probe", "problem_set": probe.problem_set_id, "probe": probe.pk,
                                "status": probe.status, "done": probe.done, "total": probe.total,
                                "in_progress": probe.in_progress, "progress_text": probe.progress_text})
