"""Problem sets, their problems (native dicts from the sandbox importers) and validation results."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.template.defaultfilters import filesizeformat, pluralize
from django.utils import timezone

from webapp.core import queueing
from webapp.core.models import LockedRow, OwnedQuerySet, RestartableJob, TransitionError

__all__ = ["Problem", "ProblemSet", "ProblemValidation", "Probe", "TransitionError"]


class ProblemSet(LockedRow, models.Model):
    """An uploaded problem file, stored as rows; validated on the Celery `sandbox` queue.

    Two state machines live on the row, each written only by the methods below (a web request, the
    import task and the validation task run in different processes; each method locks the row and decides
    on what it re-reads there):

    - import: ``importing`` (a large upload a sandbox worker parses: ``attach_upload``,
      ``record_import_progress``) -> ``done`` | ``failed`` (``end_import``); a small upload is born ``done``.
    - validation: any -> ``pending`` (``request_validation`` bumps ``validation_generation``; a task of an
      older generation stands down) -> ``running`` (``start_validation``; progress by
      ``record_validation_chunk``) -> ``done`` | ``failed`` (``finish_validation``).

    The counts and the chosen held-out share follow the problems (``refresh_counts``, ``choose_heldout``,
    ``resplit``, ``set_excluded``). Import and validation stay columns of the set rather than job rows of
    their own: a set has at most one of each at a time, the generation already tells requests apart, and
    the API, pages and live messages read these columns as their contract.
    """

    class Validation(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Import(models.TextChoices):
        IMPORTING = "importing"
        DONE = "done"
        FAILED = "failed"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="problem_sets")
    name = models.CharField(max_length=200)
    created = models.DateTimeField(auto_now_add=True)
    format = models.CharField(max_length=20, help_text="The format the importer read (native, humaneval, ...).")
    source_filename = models.CharField(max_length=255, blank=True)
    problem_count = models.PositiveIntegerField(default=0)
    train_count = models.PositiveIntegerField(default=0)
    heldout_count = models.PositiveIntegerField(default=0)
    import_errors = models.JSONField(default=list, blank=True,
                                     help_text="Lines the importer refused: [{line, field, message}].")
    import_status = models.CharField(
        max_length=10, choices=Import.choices, default=Import.DONE,
        help_text="`importing` while a sandbox worker parses a large upload; `failed` when no problem came of it.")
    import_read_bytes = models.BigIntegerField(default=0, help_text="Bytes of the stored upload read so far.")
    import_total_bytes = models.BigIntegerField(default=0, help_text="Size of the upload as sent (compressed).")
    import_lines = models.PositiveIntegerField(default=0, help_text="Lines read so far (decompressed).")
    upload_path = models.CharField(
        max_length=255, blank=True,
        help_text="The stored upload a background import reads, relative to MEDIA_ROOT; cleared when it ends.")
    validation_status = models.CharField(max_length=10, choices=Validation.choices, default=Validation.PENDING)
    validation_passed = models.PositiveIntegerField(default=0)
    validation_failed = models.PositiveIntegerField(default=0)
    validation_checked = models.PositiveIntegerField(
        default=0, help_text="Problems checked so far by the running validation (progress).")
    validation_error = models.TextField(blank=True, help_text="Why the validation job itself failed.")
    validation_started = models.DateTimeField(null=True, blank=True)
    validation_finished = models.DateTimeField(null=True, blank=True)
    validation_generation = models.PositiveIntegerField(
        default=0, help_text="Bumped by each validation request; a task for an older one stands down.")
    heldout_share = models.FloatField(
        null=True, blank=True,
        help_text="The share of problems the user chose as held-out (seeded) for a set that brought none; "
                  "null: the splits are the file's own.")
    heldout_seed = models.PositiveIntegerField(default=0, help_text="The seed of that choice.")
    excluded_count = models.PositiveIntegerField(default=0, help_text="Problems excluded from runs (kept here).")

    objects = OwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.problem_count} problems)"

    # ---- import (a large upload, parsed by a sandbox worker) ---------------------------------------

    def _refuse_unless_importing(self, locked: "ProblemSet", what: str) -> None:
        if locked.import_status != self.Import.IMPORTING:
            raise TransitionError(f"problem set {locked.pk}: {what} only while it is importing; its import "
                                  f"is {locked.import_status}")

    def attach_upload(self, path: str, size: int) -> None:
        """The stored upload (``path`` relative to MEDIA_ROOT, ``size`` bytes as sent) its import reads."""
        with transaction.atomic():
            locked = self._locked()
            self._refuse_unless_importing(locked, "an upload is attached")
            locked.upload_path, locked.import_total_bytes = path, size
            locked.save(update_fields=["upload_path", "import_total_bytes"])
            self._refresh_from(locked)

    def record_import_progress(self, lines: int, read_bytes: int) -> bool:
        """How far the import read (no lock: the task is its only writer while it imports); False, and
        nothing written, once the set is no longer importing (deleted, or another copy of the task ended it)."""
        written = ProblemSet.objects.filter(pk=self.pk, import_status=self.Import.IMPORTING).update(
            import_lines=lines, import_read_bytes=read_bytes)
        self.import_lines, self.import_read_bytes = lines, read_bytes
        return bool(written)

    def end_import(self, *, errors: list[dict], lines: int, format: str | None) -> None:
        """importing -> done (``format``: the format the problems, stored by the caller in this transaction,
        were read as) or failed (``format`` None: no problem came of the file; nor will a validation)."""
        with transaction.atomic():
            locked = self._locked()
            self._refuse_unless_importing(locked, "an import can end")
            locked.import_errors, locked.import_lines = errors, lines
            locked.import_read_bytes, locked.upload_path = locked.import_total_bytes, ""
            if format:
                locked.format, locked.import_status = format, self.Import.DONE
            else:
                locked.import_status = self.Import.FAILED
                locked.validation_status = self.Validation.FAILED
                locked.validation_error = "nothing to validate: the import failed"
            locked.save(update_fields=["import_errors", "import_read_bytes", "import_lines", "upload_path", "format",
                                       "import_status", "validation_status", "validation_error"])
            self._refresh_from(locked)

    def replace_source(self, *, format: str | None = None, errors: list[dict] | None = None) -> None:
        """New problems from a file read in the foreground (their rows are the caller's): the format read
        and the lines refused, where given."""
        with transaction.atomic():
            locked = self._locked()
            if locked.import_status == self.Import.IMPORTING:
                raise TransitionError(f"problem set {locked.pk} is being imported; replace its problems once "
                                      "the import has ended")
            locked.import_status = self.Import.DONE
            if format:
                locked.format = format
            if errors is not None:
                locked.import_errors = errors
            locked.save(update_fields=["format", "import_errors", "import_status"])
            self._refresh_from(locked)

    # ---- validation (the reference must pass, an empty program must fail) --------------------------

    def request_validation(self) -> int:
        """Any validation state -> pending, as a new generation (returned): a task started for an older
        request stops or discards its results, so a re-validation never loses to a running one."""
        with transaction.atomic():
            locked = self._locked()
            if locked.import_status != self.Import.DONE:
                raise TransitionError(f"problem set {locked.pk} has no problems to validate: its import is "
                                      f"{locked.import_status}")
            locked.validation_generation += 1
            locked.validation_status, locked.validation_error = self.Validation.PENDING, ""
            locked.validation_started = locked.validation_finished = None
            locked.validation_checked = 0
            locked.save(update_fields=["validation_generation", "validation_status", "validation_error",
                                       "validation_started", "validation_finished", "validation_checked"])
            self._refresh_from(locked)
            return locked.validation_generation

    def start_validation(self, generation: int, *, force: bool = False) -> bool:
        """pending | running (a task redelivered after its worker died starts over) -> running, counts
        reset; also done | failed with ``force``. False, and nothing written, for a task of an older
        ``generation`` or (without ``force``) one whose generation is already validated."""
        with transaction.atomic():
            locked = self._locked()
            if locked is None:
                return False
            self._refresh_from(locked)
            if generation != locked.validation_generation:
                return False
            if locked.validation_status in (self.Validation.DONE, self.Validation.FAILED) and not force:
                return False
            if locked.import_status != self.Import.DONE:
                raise TransitionError(f"problem set {locked.pk} has no problems to validate: its import is "
                                      f"{locked.import_status}")
            locked.validation_status = self.Validation.RUNNING
            locked.validation_started, locked.validation_finished, locked.validation_error = timezone.now(), None, ""
            locked.validation_checked = locked.validation_passed = locked.validation_failed = 0
            locked.save(update_fields=["validation_status", "validation_started", "validation_finished",
                                       "validation_error", "validation_checked", "validation_passed",
                                       "validation_failed"])
            self._refresh_from(locked)
            return True

    def _running_generation(self, generation: int, what: str) -> "ProblemSet | None":
        """The locked row when ``generation`` is the one running; None when the set is gone or a newer
        request owns it (that request's task writes the results)."""
        locked = self._locked()
        if locked is None or locked.validation_generation != generation:
            return None
        if locked.validation_status != self.Validation.RUNNING:
            raise TransitionError(f"problem set {locked.pk}: {what} only while its validation runs; it is "
                                  f"{locked.validation_status}")
        return locked

    def record_validation_chunk(self, generation: int, *, checked: int, passed: int) -> bool:
        """``checked`` more problems validated, ``passed`` of them ok; False when the set is gone or a newer
        validation owns it (the caller stores the chunk's verdicts in the same transaction only when True)."""
        with transaction.atomic():
            locked = self._running_generation(generation, "progress is recorded")
            if locked is None:
                return False
            locked.validation_checked += checked
            locked.validation_passed += passed
            locked.validation_failed += checked - passed
            locked.save(update_fields=["validation_checked", "validation_passed", "validation_failed"])
            self._refresh_from(locked)
            return True

    def finish_validation(self, generation: int, error: str = "") -> bool:
        """running -> done, or failed with ``error`` (the job itself broke; the verdicts stored so far stay
        with their counts). False when the set is gone or a newer validation owns it."""
        with transaction.atomic():
            locked = self._running_generation(generation, "a validation can finish")
            if locked is None:
                return False
            locked.validation_status = self.Validation.FAILED if error else self.Validation.DONE
            locked.validation_error = error
            locked.validation_finished = timezone.now()
            locked.save(update_fields=["validation_status", "validation_error", "validation_finished"])
            self._refresh_from(locked)
            return True

    # ---- counts and curation ------------------------------------------------------------------------

    def refresh_counts(self) -> None:
        """The split and exclusion counts from the set's rows; train and held-out count only included
        problems."""
        with transaction.atomic():
            locked = self._locked()
            problems = locked.problems.all()
            included = problems.filter(excluded=False)
            locked.problem_count = problems.count()
            locked.train_count = included.filter(split="train").count()
            locked.heldout_count = included.filter(split="heldout").count()
            locked.excluded_count = problems.filter(excluded=True).count()
            locked.save(update_fields=["problem_count", "train_count", "heldout_count", "excluded_count"])
            self._refresh_from(locked)

    def choose_heldout(self, share: float | None, seed: int = 0) -> None:
        """The held-out share the user chose (and its seed); ``share`` None or 0: the splits are the file's."""
        with transaction.atomic():
            locked = self._locked()
            locked.heldout_share, locked.heldout_seed = (share, seed) if share else (None, 0)
            locked.save(update_fields=["heldout_share", "heldout_seed"])
            self._refresh_from(locked)

    def resplit(self, heldout: set[str]) -> None:
        """Every problem whose id is in ``heldout`` goes to the held-out split, the others to train (the
        row's ``split`` and its ``data["split"]``); the counts follow."""
        with transaction.atomic():
            locked = self._locked()
            rows = list(locked.problems.all())
            assign_splits(rows, heldout)
            Problem.objects.bulk_update(rows, ["split", "data"], batch_size=500)
            self.refresh_counts()

    def set_excluded(self, problem: "Problem", excluded: bool) -> None:
        """Leave ``problem`` (one of this set's) out of the runs launched afterwards, or take it in again."""
        with transaction.atomic():
            locked = self._locked()
            if not Problem.objects.filter(pk=problem.pk, problem_set=locked).update(excluded=excluded):
                raise TransitionError(f"problem {problem.pk} is not one of problem set {locked.pk}'s")
            problem.excluded = excluded
            self.refresh_counts()

    @property
    def validation_badge(self) -> tuple[str, str]:
        """(state, text) of the validation badge: a finished validation with failing problems is a
        warning, not a green "done" (runs on the set train on rewards that do not measure correctness)."""
        failing = self.failing_in_use if self.validation_status == self.Validation.DONE else 0
        if failing:  # the failing problems runs would use: excluded ones are no warning
            return "warning", f"{failing} failing"
        return self.validation_status, self.validation_status

    @property
    def data_dir(self) -> Path:
        """Where the set's files lie (its probes' under ``probes/<id>/``)."""
        return Path(settings.PROBLEM_SETS_DIR) / str(self.pk)

    def latest_probe(self) -> "Probe | None":
        return self.probes.order_by("-created", "-id").first()

    def latest_finished_probe(self) -> "Probe | None":
        return self.probes.filter(status=Probe.Status.DONE).order_by("-finished", "-id").first()

    @property
    def failing_in_use(self) -> int:
        """Problems that failed validation and are not excluded: the ones runs would train on."""
        if not self.validation_failed or not self.excluded_count:
            return self.validation_failed
        return (self.problems.filter(excluded=False)
                .filter(models.Q(validation__reference_passed=False) | models.Q(validation__empty_failed=False))
                .count())

    @property
    def split_choosable(self) -> bool:
        """A held-out share may be chosen: the file brought no held-out split (or the share is the user's). Its
        held-out problems count while excluded too: including them again brings the split back (the stored count,
        of included ones only, answers without a query when it is not 0)."""
        return self.heldout_share is not None or (
            self.heldout_count == 0 and not self.problems.filter(split="heldout").exists())

    @property
    def importing(self) -> bool:
        return self.import_status == self.Import.IMPORTING

    @property
    def validation_in_progress(self) -> bool:
        return self.validation_status in (self.Validation.PENDING, self.Validation.RUNNING)

    @property
    def in_progress(self) -> bool:
        """An import or a validation of the set is under way (its pages follow it live)."""
        return self.importing or (self.import_status == self.Import.DONE and self.validation_in_progress)

    # The texts the pages show beside the badges; the live messages and the API carry them as written here.

    @property
    def validation_text(self) -> str:
        """The set page's line beside the validation badge."""
        passed, failed = self.validation_passed, self.validation_failed
        if self.validation_status == self.Validation.DONE:
            return f"{passed} problem{pluralize(passed)} ok, {failed} failing" + self._excluded_note
        if self.validation_status == self.Validation.RUNNING:
            return (f"running the reference and empty solutions: {self.validation_checked} of "
                    f"{self.problem_count} checked, {passed} ok, {failed} failing…")
        if self.importing:
            return "starts when the import is done"
        if self.validation_status == self.Validation.PENDING:
            return "queued on the sandbox workers…"
        return ""

    @property
    def _excluded_note(self) -> str:
        return f" ({self.excluded_count} excluded from runs)" if self.excluded_count else ""

    @property
    def import_text(self) -> str:
        """The set page's line while a background import runs (empty otherwise)."""
        if not self.importing:
            return ""
        return (f"{self.import_lines} line{pluralize(self.import_lines)}, {filesizeformat(self.import_read_bytes)} "
                f"of {filesizeformat(self.import_total_bytes)} read…")

    @property
    def list_text(self) -> str:
        """The set list's line beside the badge: the import while it runs or when it failed, else the validation."""
        if self.importing:
            return "importing: " + self.import_text.removesuffix("…")
        if self.import_status == self.Import.FAILED:
            return "import failed"
        if self.validation_status == self.Validation.DONE:
            return f"{self.validation_passed} ok, {self.validation_failed} failing" + self._excluded_note
        if self.validation_status == self.Validation.RUNNING:
            return f"{self.validation_checked} of {self.problem_count} checked"
        return ""


def assign_splits(rows: list["Problem"], heldout: set[str]) -> None:
    """Put the rows whose id is in ``heldout`` in the held-out split and the others in train (``split`` and
    ``data["split"]``); the caller stores them (new rows: ``bulk_create``; a set's rows: ``ProblemSet.resplit``)."""
    for row in rows:
        row.split = "heldout" if row.problem_id in heldout else "train"
        row.data = {**row.data, "split": row.split}


class Problem(models.Model):
    """One problem; `data` is the sandbox `Problem.to_dict()` (native JSON form)."""

    problem_set = models.ForeignKey(ProblemSet, on_delete=models.CASCADE, related_name="problems")
    position = models.PositiveIntegerField(help_text="0-based order in the uploaded file.")
    problem_id = models.CharField(max_length=256, help_text="The id from the uploaded file.")
    split = models.CharField(max_length=10, db_index=True)
    kind = models.CharField(max_length=10)
    tags = models.JSONField(default=list, blank=True)
    data = models.JSONField()
    excluded = models.BooleanField(
        default=False, help_text="Left out of the runs launched afterwards (and of probes); kept in the set.")

    class Meta:
        ordering = ["problem_set", "position"]
        constraints = [
            models.UniqueConstraint(fields=["problem_set", "problem_id"], name="unique_problem_id_per_set"),
        ]

    def __str__(self) -> str:
        return self.problem_id

    def to_sandbox(self):
        """The sandbox `Problem`, `excluded` as the row says (an export writes it; runs never see one)."""
        from sandbox.problems import Problem as SandboxProblem

        return SandboxProblem.from_dict({**self.data, "excluded": self.excluded})


class ProblemValidation(models.Model):
    """The reference solution must pass and an empty solution must fail."""

    problem = models.OneToOneField(Problem, on_delete=models.CASCADE, related_name="validation")
    reference_passed = models.BooleanField(default=False)
    empty_failed = models.BooleanField(default=False)
    detail = models.TextField(blank=True)
    reference_result = models.JSONField(null=True, blank=True, help_text="sandbox ExecutionResult.to_dict()")
    empty_result = models.JSONField(null=True, blank=True, help_text="sandbox ExecutionResult.to_dict()")
    finished = models.DateTimeField(auto_now=True)

    @property
    def ok(self) -> bool:
        return self.reference_passed and self.empty_failed


class Probe(RestartableJob):
    """A difficulty probe of a problem set: `python -m training probe` on the `gpu` queue, a trainer job
    (webapp.core.models.RestartableJob) whose task is `webapp.probes.services.run_probe`.

    The user's names are kept as given (`model`, `adapter`: a preset/installed model, a hub id or
    `run:<id>/step-<n>`); the server paths they resolve to never leave the worker. Its output file
    lies under the set's data dir (`output_path`); a run that filters by it copies it into its own dir.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    SUPERVISED = ("running",)
    FINISHED = ("done", "failed")

    problem_set = models.ForeignKey(ProblemSet, on_delete=models.CASCADE, related_name="probes")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="probes")
    model = models.CharField(max_length=300, help_text="The model as the user named it.")
    adapter = models.CharField(max_length=300, blank=True, help_text="An adapter checkpoint run:<id>/step-<n>, or empty.")
    samples = models.PositiveIntegerField()
    split = models.CharField(max_length=10, default="all")
    config = models.JSONField(default=dict, blank=True,
                              help_text="The run-config sections the probe sampled with (sampling, model.dtype, sandbox).")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    done = models.PositiveIntegerField(default=0, help_text="Problems probed so far (progress).")
    total = models.PositiveIntegerField(default=0, help_text="Problems to probe.")
    results = models.JSONField(default=list, blank=True,
                               help_text="[{problem_id, samples, passed, pass_rate}] in the set's order, when done.")
    summary = models.JSONField(default=dict, blank=True, help_text="The probe's summary line, when done.")
    output_path = models.CharField(max_length=500, blank=True, help_text="The probe output, relative to PROBLEM_SETS_DIR.")
    task_id = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"probe {self.pk} of set {self.problem_set_id} ({self.status})"

    @property
    def directory(self) -> Path:
        """The probe's own files: its problems, config, output and logs."""
        return self.problem_set.data_dir / "probes" / str(self.pk)

    @property
    def output_file(self) -> Path:
        return Path(settings.PROBLEM_SETS_DIR) / self.output_path

    @property
    def trainer_marker(self) -> str:
        return str(self.directory / "probe.yaml")

    @property
    def progress_text(self) -> str:
        """The set page's line while the probe is under way (empty once it ended)."""
        return self._progress_text(self.queue_place())

    def _progress_text(self, place: dict | None) -> str:
        if self.status == self.Status.RUNNING:
            return f"{self.done} of {self.total} problems probed…"
        if self.status != self.Status.PENDING:
            return ""
        return place["text"] + "…" if place else "queued on the gpu workers…"

    def queue_place(self) -> dict | None:
        """Where the pending probe stands on its queue and what it waits for (``webapp.core.queueing``:
        the probes app declares the lane); None once it left the queue."""
        return queueing.place(self) if self.status == self.Status.PENDING else None

    @property
    def reference(self) -> str:
        """How a run config names this probe (`difficulty.probe`)."""
        return f"probe:{self.pk}"

    def solve_rates(self) -> dict[str, float]:
        """Each problem's solve rate: the share of its samples that passed every test."""
        return {r["problem_id"]: r["passed"] / r["samples"] for r in self.results}

    def state(self, *, results: bool = True) -> dict:
        """The API's ``probe`` object of a problem set (and of ``POST .../probe``)."""
        place = self.queue_place()
        state = {"id": self.pk, "status": self.status, "model": self.model, "adapter": self.adapter or None,
                 "samples": self.samples, "done": self.done, "total": self.total, "error": self.error,
                 "summary": self.summary or None, "reference": self.reference,
                 "in_progress": self.in_progress, "progress_text": self._progress_text(place), "queue": place,
                 "created": self.created.isoformat(), "finished": self.finished.isoformat() if self.finished else None}
        rates = self.solve_rates()
        state["results"] = [{"problem_id": r["problem_id"], "solve_rate": rates[r["problem_id"]],
                             "pass_rate": rates[r["problem_id"]], "passed": r["passed"], "samples": r["samples"]}
                            for r in self.results] if results else []
        return state
