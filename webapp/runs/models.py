"""Training runs and everything a run records (its event log and the tables built from it).

`Run` is a ``TrainerJob`` (webapp.core.models: claim, heartbeat, finish, lost workers, the pid-reuse
check) and owns its status transitions (each inside ``transaction.atomic()`` + ``select_for_update()`` so
a supervisor, a cancel click and a stale check never interleave). The other models are read models
filled by ``services.ingest_event`` from the trainer's ``events.jsonl``; ``RunEvent`` is the
append-only log the websocket replays from.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from training.events import DONE_STATUSES
from webapp.core.models import OwnedQuerySet, TrainerJob, TransitionError

ACTIVE_STATUSES = ("queued", "running", "cancelling")
FINISHED_STATUSES = DONE_STATUSES
"""A run ends with the status its trainer's ``done`` event names (the trainer owns that vocabulary)."""
SUPERVISED_STATUSES = ("running", "cancelling")
"""A supervisor (and its trainer) holds the run: what the gpu queue counts as running."""
RESUMABLE_STATUSES = ("failed", "cancelled")
"""What resume continues from its last checkpoint."""


__all__ = ["Run", "RunEvent", "StepMetric", "ProblemStat", "Candidate", "Eval", "Checkpoint", "TransitionError",
           "status_groups"]


class RunQuerySet(OwnedQuerySet):
    def active(self):
        """Runs queued, running or cancelling (a set they use cannot be deleted)."""
        return self.filter(status__in=ACTIVE_STATUSES)


class Run(TrainerJob):
    Status = models.TextChoices("Status", [(s.upper(), s) for s in ACTIVE_STATUSES + FINISHED_STATUSES])
    WAITING = ("queued",)
    SUPERVISED = SUPERVISED_STATUSES
    FINISHED = FINISHED_STATUSES

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    notes = models.TextField(blank=True, default="", help_text="the user's notes or tags, free text")
    problem_set = models.ForeignKey("problems.ProblemSet", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="runs")
    config = models.JSONField(default=dict, help_text="the full merged run config (training.config)")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    step = models.IntegerField(default=0, help_text="last RL step reported by the trainer")
    steps = models.IntegerField(default=0, help_text="train.steps of the config")
    celery_task_id = models.CharField(max_length=64, blank=True, default="")
    run_dir = models.CharField(max_length=500, blank=True, default="")
    events_offset = models.BigIntegerField(default=0, help_text="bytes of events.jsonl already ingested")
    events_seq = models.IntegerField(default=0, help_text="lines of events.jsonl already ingested")
    resume_count = models.IntegerField(default=0)
    auto_resume = models.BooleanField(default=False, help_text="stopped by a gpu worker shutdown: resumed "
                                      "automatically when a gpu worker starts")
    auto_resumes = models.IntegerField(default=0, help_text="resumes made automatically after worker shutdowns")
    created = models.DateTimeField(auto_now_add=True)
    queued = models.DateTimeField(default=timezone.now, help_text="when the run was last put on the gpu queue "
                                  "(created, or resumed): its place in line")

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"run {self.pk} {self.name} ({self.status})"

    @property
    def path(self) -> Path:
        return Path(self.run_dir)

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_resumable(self) -> bool:
        return self.status in RESUMABLE_STATUSES

    # ---- state transitions (each locks the row and re-reads the status it decides on) --------------

    @property
    def trainer_marker(self) -> str:
        return str(self.path / "run.yaml")

    def set_up(self, *, config: dict, run_dir: str) -> None:
        """A new run's full config (its ``problems`` path filled in) and the directory it was written to;
        once, while the run is still queued."""
        with transaction.atomic():
            run = self._locked()
            if run.run_dir:
                raise TransitionError(f"run {run.pk} is already set up in {run.run_dir}")
            if run.status != Run.Status.QUEUED:
                raise TransitionError(f"run {run.pk} is {run.status}; only a new, queued run is set up")
            run.config, run.run_dir = config, run_dir
            run.save(update_fields=["config", "run_dir"])
            self._refresh_from(run)

    def edit(self, *, name: str, notes: str) -> None:
        """The user's name and notes (checked by the caller); any status."""
        self.name, self.notes = name, notes
        Run.objects.filter(pk=self.pk).update(name=name, notes=notes)

    def on_claim(self) -> None:
        self.started = self.started or timezone.now()  # a resumed run keeps its first start

    def record_line(self, *, seq: int, offset: int | None, step: int | None) -> None:
        """Line ``seq`` of events.jsonl is stored: where its follower goes on (``offset``, bytes through
        the line; None: not a follower's read), the ``step`` a new step event reached, and a heartbeat."""
        updates: dict = {"heartbeat": timezone.now()}
        if offset is not None:
            updates.update(events_offset=offset, events_seq=seq + 1)
            self.events_offset, self.events_seq = offset, seq + 1
        if step is not None:
            updates["step"] = self.step = step
        Run.objects.filter(pk=self.pk).update(**updates)

    def stop_for_shutdown(self, attempt: int) -> None:
        """The gpu worker supervising this attempt is being stopped: when the run ends, it is resumed
        automatically once a gpu worker starts (set first, so that a supervisor killed meanwhile still
        leaves a run the next sweep resumes)."""
        Run.objects.filter(pk=self.pk, resume_count=attempt, status=Run.Status.RUNNING).update(auto_resume=True)

    def request_cancel(self) -> str:
        """Cooperative stop: a queued run is cancelled at once, a running one goes to cancelling."""
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=self.pk)
            if run.status == Run.Status.QUEUED:
                run.status, run.finished = Run.Status.CANCELLED, timezone.now()
            elif run.status == Run.Status.RUNNING:
                run.status = Run.Status.CANCELLING
            elif run.status != Run.Status.CANCELLING:
                raise TransitionError(f"run {run.pk} is {run.status}; only a queued or running run can be cancelled")
            run.save(update_fields=["status", "finished"])
            self._refresh_from(run)
            return run.status

    def requeue(self, *, automatic: bool = False) -> None:
        """failed | cancelled -> queued (resume from the last checkpoint).

        ``automatic``: the resume after a worker shutdown, only while one is pending (a run the
        user resumed, or that failed again since, is left alone). Any resume settles a pending one.
        """
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=self.pk)
            if run.status not in RESUMABLE_STATUSES:
                raise TransitionError(f"run {run.pk} is {run.status}; only a failed or cancelled run can be resumed")
            if automatic and not run.auto_resume:
                raise TransitionError(f"run {run.pk} is not waiting for an automatic resume")
            run.status, run.error, run.finished = Run.Status.QUEUED, "", None
            run.queued = timezone.now()  # published again now: behind the jobs queued meanwhile
            run.resume_count += 1
            run.auto_resumes += automatic
            run.auto_resume = False
            run.worker_pid = run.trainer_pid = None
            run.celery_task_id = uuid.uuid4().hex  # a new supervisor task: the sweep tells it from the last one
            run.save()
            self._refresh_from(run)

    def finish(self, status: str, error: str = "", **fields) -> bool:
        """Any active status -> succeeded | failed | cancelled; False (nothing changed) if already finished."""
        if status not in FINISHED_STATUSES:
            raise TransitionError(f"{status!r} is not a final status; use one of {', '.join(FINISHED_STATUSES)}")
        return super().finish(status, error, **fields)


def status_groups() -> dict:
    """The statuses as the pages ask about them (``json_script`` "run-statuses"), so that no page script
    lists statuses of its own: the groups, and the three a page treats on their own, by role."""
    return {"all": list(Run.Status.values), "active": list(ACTIVE_STATUSES), "finished": list(FINISHED_STATUSES),
            "supervised": list(SUPERVISED_STATUSES), "resumable": list(RESUMABLE_STATUSES),
            "queued": Run.Status.QUEUED.value, "running": Run.Status.RUNNING.value,
            "cancelling": Run.Status.CANCELLING.value}


class RunEvent(models.Model):
    """One line of the run's events.jsonl, as written (append-only; ``seq`` = 0-based line number)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.IntegerField()
    kind = models.CharField(max_length=20)
    step = models.IntegerField(null=True, blank=True)
    payload = models.JSONField()

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique")]
        indexes = [models.Index(fields=["run", "step"])]


class StepMetric(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_metrics")
    step = models.IntegerField()
    metrics = models.JSONField(default=dict)
    time = models.FloatField(null=True, blank=True, help_text="Unix time of the step event")

    class Meta:
        ordering = ["step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="step_metric_unique")]


class ProblemStat(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="problem_stats")
    problem_id = models.CharField(max_length=500)
    split = models.CharField(max_length=20, default="train")
    solve_rate = models.FloatField(default=0.0, help_text="the share of the problem's candidates (train: at its "
                                   "latest step; held-out: at its latest evaluation) that passed every test")
    history = models.JSONField(default=list, help_text="[[step, solve_rate], ...] ordered by step")
    zero_variance_groups = models.IntegerField(default=0, help_text="steps whose candidates all got one reward")
    zero_variance_steps = models.JSONField(default=list)
    set_aside_steps = models.JSONField(default=list, blank=True, help_text="steps whose group was sampled but "
                                       "left out of the update (dynamic sampling, drop_zero_variance_groups)")
    last_step = models.IntegerField(default=0)
    solve_rate_turn1 = models.FloatField(null=True, blank=True, help_text="multi-turn runs (sampling.turns > 1): "
                                         "like solve_rate, counting only first turns; null for a one-turn run")

    class Meta:
        ordering = ["problem_id"]
        constraints = [models.UniqueConstraint(fields=["run", "problem_id"], name="problem_stat_unique")]


class Candidate(models.Model):
    """One sampled program: a training candidate (a ``problem`` event's) or a held-out evaluation sample
    (an ``eval`` event's ``per_problem``), told apart by ``phase``."""

    class Phase(models.TextChoices):
        TRAIN = "train"
        EVAL = "eval"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="candidates")
    phase = models.CharField(max_length=10, choices=Phase.choices, default=Phase.TRAIN,
                             help_text="train: sampled for an RL step; eval: sampled by the held-out "
                                       "evaluation at that step (step 0: before training)")
    step = models.IntegerField()
    problem_id = models.CharField(max_length=500)
    index = models.IntegerField()
    code = models.TextField(blank=True, default="")
    reward = models.FloatField(null=True, blank=True)
    rewards = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    passed = models.BooleanField(default=False)
    status = models.CharField(max_length=20, blank=True, default="", help_text="execution outcome")
    truncated = models.BooleanField(default=False, help_text="generation hit max_new_tokens (cut off)")
    overlong_penalty = models.FloatField(null=True, blank=True, help_text="reward.overlong soft: the length "
                                         "penalty included in reward (in [-1, 0]); null when none applied")
    penalized_flags = models.JSONField(default=list, blank=True, help_text="the flags of reward.penalize_flags "
                                       "it carries (in any execution): they set its total reward to 0")
    set_aside = models.CharField(max_length=20, blank=True, default="", help_text="why its group was left out "
                                 "of the update (zero_variance, surplus); empty when the update used it")
    turns = models.JSONField(default=list, blank=True, help_text="multi-turn repair: every turn, {reply, code, "
                             "feedback, result, reward, rewards, truncated, flags}; the row's own fields are the "
                             "last turn's; empty for a one-turn candidate")

    class Meta:
        ordering = ["step", "index"]
        indexes = [models.Index(fields=["run", "problem_id", "step"]), models.Index(fields=["run", "status"])]


class Eval(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="evals")
    step = models.IntegerField()
    split = models.CharField(max_length=20, default="heldout")
    pass_at_1 = models.FloatField(null=True, blank=True)
    pass_at_1_turn1 = models.FloatField(null=True, blank=True, help_text="multi-turn runs: pass@1 of the first "
                                        "turns alone (pass_at_1 counts a sample passing by its last turn)")
    pass_at_k = models.JSONField(default=dict)
    time = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["step", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "step", "split"], name="eval_unique")]


class Checkpoint(models.Model):
    class Kind(models.TextChoices):
        ADAPTER = "adapter"
        MERGED = "merged"
        FULL = "full"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    kind = models.CharField(max_length=20, choices=Kind.choices)
    path = models.CharField(max_length=500, help_text="relative to the run dir")
    size_bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["step", "kind"]
        constraints = [models.UniqueConstraint(fields=["run", "path"], name="checkpoint_path_unique")]
