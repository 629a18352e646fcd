"""Benchmark evaluations (docs/design.md "Benchmark evaluation"): pass@k of a model on a suite or a
problem set, as a ``gpu`` job.

- ``request_evaluation``: check what the user named (the model as the run form does, never a path; a
  suite of ``training.suites``; a problem set of their own), create the ``Evaluation`` and publish
  ``evals.evaluate`` (``EVAL_JOB``) after the commit. ``request_before_after``: a run's base model and
  its best (else last) checkpoint, on the same suite, samples, seed and sampling settings.
- ``run_evaluation`` (the task's body, idempotent): a thin supervisor around ``python -m training eval
  --out FILE --record`` as a child process (``webapp.core.supervision``, as a probe's): one
  ``EvalProblem`` per output line as it appears (progress), the summary when it ends; a cancel asks the
  child to stop (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import logging
import shutil
import sys

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from training.config import ConfigError, config_from_dict, save_config
from training.evaluation import default_ks
from training.suites import SuiteError, load_suite

from webapp.core import supervision
from webapp.core.groups import user_group
from webapp.core.jobs import RowJob
from webapp.core.jsonsafe import db_safe
from webapp.core.refusals import Conflict
from webapp.probes.services import sampling_config
from webapp.problems.models import ProblemSet
from webapp.problems.services import write_problems_jsonl
from webapp.runs.archive import best_checkpoint_ids
from webapp.runs.config import default_config, merge_config
from webapp.runs.model_refs import check_model_field, checkpoint_reference, resolve_model
from webapp.runs.models import Run

from .models import EvalProblem, Evaluation

log = logging.getLogger("crucible.evals")

POLL_S = 0.2
CHECK_S = 1.0
"""How often the supervisor beats the row's heart and looks for a cancel (or the row deleted)."""
KILL_GRACE_S = 10
DEFAULT_SAMPLES = 10
"""n of pass@k by default: pass@1 and pass@10, as HumanEval results are quoted."""
SPLITS = ("all", "heldout", "train")


class EvalConflict(Conflict):
    """The evaluation cannot be done now (a set not imported, a run without a checkpoint, already over)."""


# ---- request ----------------------------------------------------------------------------------------


def _check_samples(samples, ks) -> list[int]:
    limit = settings.PROBE_MAX_SAMPLES
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= limit:
        raise ConfigError("samples", f"must be a whole number from 1 to {limit} (this server's limit on samples "
                                     f"per problem, CRUCIBLE_PROBE_MAX_SAMPLES); got {samples!r}")
    if ks is None or ks == []:
        return default_ks(samples)
    if not isinstance(ks, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
        raise ConfigError("ks", f"must be a list of whole numbers; got {ks!r}")
    bad = [k for k in ks if not 1 <= k <= samples]
    if bad:
        raise ConfigError("ks", f"every k must be from 1 to samples ({samples}); got {bad}")
    return sorted(set(ks) | {1})


def _benchmark_size(user, suite, problem_set, split) -> tuple[str, ProblemSet | None, int]:
    if bool(suite) == (problem_set is not None):
        raise ConfigError("suite", "name either a suite (humaneval, humaneval:N) or a problem set, not both "
                                   "and not neither")
    if suite:
        try:
            return suite.strip(), None, len(load_suite(suite))
        except SuiteError as exc:
            raise ConfigError("suite", str(exc).removeprefix("suite: ")) from None
    if problem_set.owner_id != user.pk and not user.is_staff:
        raise ConfigError("problem_set", "no such problem set of yours")
    if split not in SPLITS:
        raise ConfigError("split", f"must be one of {', '.join(SPLITS)}; got {split!r}")
    if problem_set.import_status != ProblemSet.Import.DONE:
        raise EvalConflict(f"problem set {problem_set.pk} has no problems to evaluate yet "
                           f"(import {problem_set.import_status})")
    total = {"all": problem_set.problem_count, "heldout": problem_set.heldout_count,
             "train": problem_set.train_count}[split]
    if not total:
        raise ConfigError("split", f"problem set {problem_set.name!r} has no {split} problems")
    return "", problem_set, total


def request_evaluation(user, *, model: str, suite: str | None = None, problem_set: ProblemSet | None = None,
                       split: str = "all", samples: int = DEFAULT_SAMPLES, ks: list[int] | None = None,
                       seed: int = 0, label: str = "", config: dict | None = None, run: Run | None = None,
                       publish: bool = True) -> Evaluation:
    """Queue an evaluation of ``model`` on ``suite`` or ``problem_set`` by ``user``; ConfigError names a bad
    field, EvalConflict says why it cannot be done now. ``config`` (sampling sections) defaults to the
    model's run's or preset's (``probes.services.sampling_config``)."""
    model = check_model_field(model, user)
    ks = _check_samples(samples, ks)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        raise ConfigError("seed", f"must be a whole number from 0 to 2^31-1; got {seed!r}")
    suite, problem_set, total = _benchmark_size(user, suite, problem_set, split)
    checkpoint = checkpoint_reference(model)
    if checkpoint is not None:
        run, step = Run.objects.get(pk=checkpoint[0]), checkpoint[1]  # resolve_model checked it is the user's
    else:
        step = None
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            owner=user, suite=suite, problem_set=problem_set, split=split if problem_set else "all", model=model,
            run=run, step=step, label=label, samples=samples, ks=ks, seed=seed,
            config=config if config is not None else sampling_config(model, user), total=total)
        evaluation.task_id = EVAL_JOB.task_id(evaluation.pk)
        evaluation.save(update_fields=["task_id"])
        if publish:
            transaction.on_commit(lambda: publish_evaluation(evaluation.pk))
    log.info("evaluation %s of %s on %s (%d samples) queued", evaluation.pk, model, evaluation.benchmark, samples)
    return evaluation


def run_checkpoint_step(run: Run) -> int:
    """The step whose checkpoint stands for ``run`` after training: its best by held-out pass@1, else its
    last; EvalConflict when it has none."""
    checkpoints = list(run.checkpoints.all())
    if not checkpoints:
        raise EvalConflict(f"run {run.pk} has no checkpoint yet: evaluate it once it saved one")
    best = best_checkpoint_ids(run, checkpoints)
    return max(c.step for c in checkpoints if not best or c.pk in best)


def request_before_after(run: Run, user, *, suite: str | None = None, problem_set: ProblemSet | None = None,
                         split: str = "all", samples: int = DEFAULT_SAMPLES, ks: list[int] | None = None,
                         seed: int = 0) -> tuple[Evaluation, Evaluation]:
    """The run's base model ("before") and its best, else last, checkpoint ("after") on the same benchmark
    with the same samples, seed and sampling settings (the run's own)."""
    if run.owner_id != user.pk and not user.is_staff:
        raise ConfigError("run", "no such run of yours")
    step = run_checkpoint_step(run)
    after_model = f"run:{run.pk}/step-{step}"
    base = str((run.config or {}).get("model", {}).get("name_or_path") or "")
    config = sampling_config(after_model, run.owner)
    with transaction.atomic():
        common = dict(suite=suite, problem_set=problem_set, split=split, samples=samples, ks=ks, seed=seed,
                      config=config, run=run)
        before = request_evaluation(user, model=base, label="before", **common)
        after = request_evaluation(user, model=after_model, label="after", **common)
    return before, after


EVAL_JOB = RowJob("evals.evaluate", rows=lambda: Evaluation.objects.filter(status=Evaluation.Status.PENDING),
                  prefix="evaluation", what="the evaluation again for evaluations")


def publish_evaluation(evaluation_id: int) -> bool:
    """Publish ``evals.evaluate``; False (logged) when the broker is down: the sweep publishes it again."""
    return EVAL_JOB.publish_row(evaluation_id)


def cancel_evaluation(evaluation: Evaluation) -> Evaluation:
    """Stop ``evaluation`` (``Evaluation.cancel``) and tell the owner's pages; EvalConflict when it is over."""
    if not evaluation.cancel():
        raise EvalConflict(f"evaluation {evaluation.pk} is already {evaluation.status}")
    notify(evaluation)
    return evaluation


# ---- the job ----------------------------------------------------------------------------------------


def eval_command(evaluation: Evaluation, resolved) -> list[str]:
    directory = evaluation.directory
    source = (["--suite", evaluation.suite] if evaluation.suite else
              ["--problems", str(directory / "problems.jsonl"), "--split", evaluation.split])
    return [sys.executable, "-m", "training", "eval", "--model", resolved.name_or_path,
            *[arg for a in resolved.adapters for arg in ("--adapter", a)], *source,
            "--samples", str(evaluation.samples), "--k", ",".join(map(str, evaluation.ks)),
            "--seed", str(evaluation.seed), "--config", str(directory / "eval.yaml"),
            "--out", str(directory / "eval.jsonl"), "--record", "--no-progress"]


def run_evaluation(evaluation_id: int) -> Evaluation | None:
    """Do evaluation ``evaluation_id`` (the body of ``evals.evaluate``); idempotent. A finished one is left
    as it is, a running one whose worker is alive too; one whose worker died is run again."""
    evaluation = Evaluation.objects.filter(pk=evaluation_id).first()
    if evaluation is None:
        return None
    return supervision.run_job(evaluation, _supervise, notify=notify, log=log,
                               fail=lambda e, error: _finish(e, Evaluation.Status.FAILED, error=error))


def fail_lost_evaluations() -> list[int]:
    """Fail every running (or cancelling) evaluation whose worker died -> their ids."""
    return [evaluation.pk for evaluation in Evaluation.lost() if evaluation.fail_lost("evaluate again")]


def _supervise(evaluation: Evaluation) -> Evaluation | None:
    try:
        resolved = resolve_model(evaluation.model, evaluation.owner)
        command = eval_command(evaluation, resolved)
    except ConfigError as exc:  # the checkpoint is gone since the request
        return _finish(evaluation, Evaluation.Status.FAILED, error=f"model: {exc.message}")
    directory = evaluation.directory
    shutil.rmtree(directory, ignore_errors=True)  # a rerun starts clean
    directory.mkdir(parents=True)
    EvalProblem.objects.filter(evaluation=evaluation).delete()
    if evaluation.problem_set is not None:
        write_problems_jsonl(evaluation.problem_set, directory / "problems.jsonl")
    config = merge_config(default_config(), evaluation.config)
    config["model"]["name_or_path"] = resolved.name_or_path
    config["problems"] = str(directory / "problems.jsonl")  # a required key; eval reads --suite/--problems
    save_config(config_from_dict(config), directory / "eval.yaml")
    out = directory / "eval.jsonl"
    summary: dict = {}
    gone = False

    def on_lines(lines) -> None:
        rows = []
        for _, line, _ in lines:
            if "problem_id" in line:
                rows.append(EvalProblem(
                    evaluation=evaluation, position=evaluation.done + len(rows), problem_id=str(line["problem_id"]),
                    n=int(line.get("n", 0)), c=int(line.get("c", 0)), pass_at_1=float(line.get("pass@1", 0.0)),
                    pass_at_k=db_safe(line.get("pass@k") or {}), candidates=db_safe(line.get("candidates") or [])))
            elif isinstance(line.get("summary"), dict):
                summary.update(line["summary"])
        if rows and not gone:
            EvalProblem.objects.bulk_create(rows)
            evaluation.record_progress(evaluation.done + len(rows))
            notify(evaluation)

    def check() -> float | None:
        nonlocal gone
        status = evaluation.beat()
        gone = status is None
        return KILL_GRACE_S if gone or status == Evaluation.Status.CANCELLING else None

    rc = supervision.run_child(evaluation, command, directory=directory, out=out, on_lines=on_lines, check=check,
                               poll_s=POLL_S, check_s=CHECK_S, grace_s=KILL_GRACE_S)
    if gone or not Evaluation.objects.filter(pk=evaluation.pk).exists():
        shutil.rmtree(directory, ignore_errors=True)
        return None
    if evaluation.beat() == Evaluation.Status.CANCELLING:
        return _finish(evaluation, Evaluation.Status.CANCELLED, error="cancelled")
    if rc != 0:
        error = supervision.exit_error("the evaluation", rc, directory)
        return _finish(evaluation, Evaluation.Status.FAILED, error=error)
    if "pass@1" not in summary:
        return _finish(evaluation, Evaluation.Status.FAILED, error=f"{out.name} ended without its summary line")
    # The CLI names the model as the worker resolved it (a server path): the stored summary as the user did.
    summary.update(model=evaluation.model, adapter=None)
    return _finish(evaluation, Evaluation.Status.DONE, pass_at_1=float(summary["pass@1"]),
                   pass_at_k=db_safe(summary.get("pass@k") or {}), summary=db_safe(summary))


def _finish(evaluation: Evaluation, status: str, *, error: str = "", **fields) -> Evaluation | None:
    evaluation.finish(status, db_safe(error), **fields)
    if not Evaluation.objects.filter(pk=evaluation.pk).exists():
        return None
    notify(evaluation)
    log.info("evaluation %s: %s", evaluation.pk, evaluation.status)
    return evaluation


def notify(evaluation: Evaluation) -> None:
    """Tell the owner's open pages how far it got (group ``user-<id>``, /ws/notifications/)."""
    payload = {"event": "evaluation", "evaluation": evaluation.pk, "status": evaluation.status,
               "done": evaluation.done, "total": evaluation.total, "progress_text": evaluation.progress_text}
    try:
        async_to_sync(get_channel_layer().group_send)(user_group(evaluation.owner_id),
                                                      {"type": "notify", "payload": payload})
    except Exception:  # a courtesy: the pages also poll, and the rows are written
        log.warning("evaluation %s: could not send its notification", evaluation.pk, exc_info=True)
