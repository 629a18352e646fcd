"""Benchmark evaluations: pass@k of a model (an installed/hub model or a checkpoint of the owner's run) on
a suite (``training.suites``: HumanEval, shipped offline by a package) or on one of the owner's problem
sets, as a ``gpu`` job supervising ``python -m training eval`` (webapp.evals.services)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from webapp.core.models import OwnedQuerySet, RestartableJob
from webapp.problems.models import ProblemSet
from webapp.runs.models import Run


class Evaluation(RestartableJob):
    """One evaluation: ``samples`` completions per problem of ``suite`` (or ``problem_set``) from ``model``
    with ``seed``; ``pass_at_1`` and ``pass_at_k`` (``{"k": value}``) by the unbiased estimator when done.

    ``model`` is kept as the user named it (``models/tiny``, ``org/name``, ``run:<id>/step-<n>``); the server
    paths it resolves to never leave the worker. ``run`` and ``step`` say whose checkpoint it scored (the
    model card and the run page find it by them); a run's "before" evaluation (its base model) has the run
    and no step.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        CANCELLING = "cancelling"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    SUPERVISED = ("running", "cancelling")
    FINISHED = ("done", "failed", "cancelled")

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluations")
    suite = models.CharField(max_length=100, blank=True, help_text="A suite spec (humaneval, humaneval:N); "
                                                                   "empty when a problem set is the benchmark.")
    problem_set = models.ForeignKey(ProblemSet, null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="evaluations")
    split = models.CharField(max_length=10, default="all", help_text="The problem set's problems evaluated "
                                                                     "(all, heldout, train); a suite: all.")
    model = models.CharField(max_length=300, help_text="The model as the user named it.")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="evaluations",
                            help_text="The run whose checkpoint (step) or base model (no step) this scored.")
    step = models.IntegerField(null=True, blank=True, help_text="The checkpoint's step; null for a base model.")
    label = models.CharField(max_length=10, blank=True, help_text="before / after for a run's pair, else empty.")
    samples = models.PositiveIntegerField()
    ks = models.JSONField(default=list, help_text="The k of pass@k reported (each <= samples).")
    seed = models.IntegerField(default=0)
    config = models.JSONField(default=dict, blank=True,
                              help_text="The run-config sections it sampled with (sampling, model.dtype, sandbox).")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    done = models.PositiveIntegerField(default=0, help_text="Problems evaluated so far (progress).")
    total = models.PositiveIntegerField(default=0, help_text="Problems to evaluate.")
    pass_at_1 = models.FloatField(null=True, blank=True)
    pass_at_k = models.JSONField(default=dict, blank=True, help_text='{"k": pass@k} for each k other than 1.')
    summary = models.JSONField(default=dict, blank=True, help_text="The eval's summary line, when done.")
    task_id = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.pk} of {self.model} on {self.benchmark} ({self.status})"

    # ---- what it is ---------------------------------------------------------------------------------

    @property
    def benchmark(self) -> str:
        """The suite spec, or ``set:<id>`` for a problem set: evaluations with the same one compare."""
        return self.suite or f"set:{self.problem_set_id}"

    @property
    def benchmark_title(self) -> str:
        if self.suite:
            return self.suite
        return f"problem set {self.problem_set.name}" if self.problem_set else "(deleted problem set)"

    @property
    def progress_text(self) -> str:
        if self.status == self.Status.RUNNING:
            return f"{self.done} of {self.total} problems evaluated…"
        if self.status == self.Status.CANCELLING:
            return "cancelling…"
        return "queued on the gpu workers…" if self.status == self.Status.PENDING else ""

    # ---- its files and its child --------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """Its own files: the problems (a set), config, the eval's output and logs."""
        return Path(getattr(settings, "EVALS_DIR", Path(settings.DATA_DIR) / "evals")) / str(self.pk)

    @property
    def trainer_marker(self) -> str:
        return str(self.directory / "eval.yaml")

    def cancel(self) -> bool:
        """pending -> cancelled at once; running -> cancelling (its supervisor stops the child and finishes it
        cancelled); cancelling stays. False when it is already over (nothing changed)."""
        with transaction.atomic():
            job = self._locked()
            if job is None or job.status in self.FINISHED:
                if job is not None:
                    self._refresh_from(job)
                return False
            if job.status == self.Status.PENDING:
                job.status, job.error, job.finished = self.Status.CANCELLED, "cancelled before it started", timezone.now()
            elif job.status == self.Status.RUNNING:
                job.status = self.Status.CANCELLING
            job.save()
            self._refresh_from(job)
            return True

    # ---- the API's object ---------------------------------------------------------------------------

    def state(self) -> dict:
        return {"id": self.pk, "status": self.status, "suite": self.suite or None, "problem_set": self.problem_set_id,
                "benchmark": self.benchmark, "model": self.model, "run": self.run_id, "step": self.step,
                "label": self.label or None, "samples": self.samples, "ks": self.ks, "seed": self.seed,
                "done": self.done, "total": self.total, "pass@1": self.pass_at_1, "pass@k": self.pass_at_k or {},
                "mean_test_pass_rate": (self.summary or {}).get("mean_test_pass_rate"), "error": self.error,
                "in_progress": self.in_progress, "progress_text": self.progress_text,
                "created": self.created.isoformat(), "finished": self.finished.isoformat() if self.finished else None}


class EvalProblem(models.Model):
    """One problem's outcome in an evaluation: ``c`` of ``n`` samples passed every test, and its samples
    (code, reward, execution result) for the per-problem view."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="problems")
    position = models.PositiveIntegerField(help_text="Its place in the benchmark's order.")
    problem_id = models.CharField(max_length=300)
    n = models.PositiveIntegerField()
    c = models.PositiveIntegerField()
    pass_at_1 = models.FloatField()
    pass_at_k = models.JSONField(default=dict, blank=True)
    candidates = models.JSONField(default=list, blank=True, help_text="[{code, reward, rewards, result, ...}]")

    class Meta:
        ordering = ["evaluation", "position"]
        constraints = [models.UniqueConstraint(fields=["evaluation", "problem_id"], name="evalproblem_unique")]

    def row(self) -> dict:
        return {"problem_id": self.problem_id, "n": self.n, "c": self.c, "pass@1": self.pass_at_1,
                "pass@k": self.pass_at_k or {}}
