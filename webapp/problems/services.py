"""Problem-set workflows: import an upload, validate it on the sandbox queue, export, delete.

Parsing is the sandbox importers' job (`sandbox.formats.parse_stream`), the validation check is
the sandbox's (`sandbox.checks.run_checks`); execution is the sandbox runner's. This module only turns their plain results into rows and state changes.
A small upload is imported in the request; a larger one is stored under MEDIA_ROOT and imported
by `problems.import_upload` on the sandbox queue, which then queues the validation.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from webapp import env
from webapp.core.groups import user_group
from webapp.core.jobs import DurableJob, Pending, RowJob
from webapp.core.jsonsafe import db_safe
from webapp.core.refusals import Conflict
from webapp.core.text import name_problem
from . import curation
from .environments import environment_quota_errors
from .models import Problem, ProblemSet, ProblemValidation, TransitionError

if TYPE_CHECKING:
    from sandbox.checks import ProblemCheck

log = logging.getLogger("crucible.problems")

UPLOAD_FORMATS = ("auto", "native", "humaneval", "mbpp", "apps", "codecontests")
STORED_STREAM_CHARS = 64 * 1024
"""stdout/stderr kept per stored validation result (the page shows them; the sandbox caps at 1 MiB)."""
VALIDATION_CHUNK_MIN = 32
"""Fewest problems validated between two progress updates (more with more sandbox workers)."""
IMPORT_PROGRESS_INTERVAL_S = 0.5
"""Least time between two stored progress updates of a background import."""


class ProblemSetInUse(Conflict):
    """Deleting a problem set that a queued, running or cancelling run still uses."""


def _error(line: int, field: str | None, message: str) -> dict:
    return {"line": line, "field": field, "message": message}


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def too_large_message(name: str, max_bytes: int | None = None) -> str:
    max_bytes = settings.UPLOAD_MAX_BYTES if max_bytes is None else max_bytes
    return (f"{name} is larger than the upload limit of {_mib(max_bytes)} (CRUCIBLE_UPLOAD_MAX_MB); "
            "split it or compress it as .jsonl.gz")


class _CappedReader:
    """Reads an upload's bytes, flagging (and stopping at) more than `max_bytes`: `size` can lie."""

    def __init__(self, fileobj: IO[bytes], max_bytes: int):
        self.fileobj, self.max_bytes, self.read_bytes, self.too_large = fileobj, max_bytes, 0, False

    def read(self, n: int = -1) -> bytes:
        if self.too_large:
            return b""
        want = self.max_bytes + 1 - self.read_bytes
        data = self.fileobj.read(want if n is None or n < 0 else min(n, want))
        if isinstance(data, str):
            data = data.encode("utf-8")
        self.read_bytes += len(data)
        if self.read_bytes > self.max_bytes:
            self.too_large = True
            return b""
        return data


class TooLargeToParseInline(Exception):
    """The upload's text is past UPLOAD_INLINE_BYTES: it is imported in the background instead."""


def parse_upload(uploaded_file: IO[bytes], filename: str, format: str, progress=None, *,
                 inline: bool = False):
    """Parse an upload straight from its (temporary) file, never holding it whole: `(LoadResult | None, errors)`.

    The compressed size is bounded by UPLOAD_MAX_BYTES, the text by UPLOAD_MAX_EXPANDED_BYTES and
    the lines by UPLOAD_MAX_LINES, each checked while reading, so a refusal costs only the bytes and
    lines read up to its bound. `progress(lines, read_bytes)` counts lines of text and bytes of the
    upload as sent. `inline`: raise TooLargeToParseInline once the text passes UPLOAD_INLINE_BYTES.
    """
    from sandbox.formats import parse_stream

    max_expanded = settings.UPLOAD_MAX_EXPANDED_BYTES
    budget = min(settings.UPLOAD_INLINE_BYTES, max_expanded) if inline else max_expanded
    max_bytes = settings.UPLOAD_MAX_BYTES
    too_big = [_error(0, "file", too_large_message(filename, max_bytes))]
    size = getattr(uploaded_file, "size", None)
    if size is not None and size > max_bytes:
        return None, too_big
    if inline and size is not None and size > budget:
        raise TooLargeToParseInline(filename)
    if hasattr(uploaded_file, "seek"):
        uploaded_file.seek(0)
    reader = _CappedReader(uploaded_file, max_bytes)

    def report(lines: int, _text_bytes: int) -> None:
        progress(lines, reader.read_bytes)

    result = parse_stream(reader, filename, format, max_bytes=budget, max_lines=settings.UPLOAD_MAX_LINES,
                          progress=report if progress else None)
    if reader.too_large:
        return None, too_big
    if result.limit == "bytes" and budget < max_expanded:
        raise TooLargeToParseInline(filename)
    if reader.read_bytes == 0:
        return None, [_error(0, "file", f"{filename} is empty")]
    if result.limit is not None:
        return None, [_error(0, "file", f"{e.message} (CRUCIBLE_UPLOAD_MAX_"
                                        f"{'LINES' if result.limit == 'lines' else 'EXPANDED_MB'})")
                      for e in result.errors]
    return result, []


Heldout = tuple[float, int] | None  # (share, seed) of a held-out split chosen at upload


def create_problem_set(owner, name: str, uploaded_file: IO[bytes], format: str = "auto", *,
                       validate: bool = True, heldout: Heldout = None) -> tuple[ProblemSet | None, list[dict]]:
    """Import an uploaded `.jsonl` / `.jsonl.gz` file as a new problem set and queue its validation.

    Returns `(problem_set, errors)`; `errors` are `{line, field, message}` with 1-based lines (0 = the
    file as a whole). Good problems are kept when some lines are bad; a file with no good problem is
    refused: `(None, errors)` and nothing is stored. `heldout` `(share, seed)`: that share of the problems
    becomes the held-out split, chosen by the seed, unless the file brings held-out problems of its own.
    """
    filename, name, errors = _check_upload_request(uploaded_file, name, format)
    if errors:
        return None, errors
    result, errors = parse_upload(uploaded_file, filename, format)
    return _create_from_result(owner, name, filename, result, errors, validate=validate, heldout=heldout)


def upload_problem_set(owner, name: str, uploaded_file, format: str = "auto",
                       heldout: Heldout = None) -> tuple[ProblemSet | None, list[dict]]:
    """What the upload form and the API do: `create_problem_set` for an upload whose text is at most
    UPLOAD_INLINE_BYTES; a larger one is stored and imported by a sandbox worker (the set is returned
    `importing`, with no problems yet), so the request never decompresses or parses much."""
    filename, name, errors = _check_upload_request(uploaded_file, name, format)
    if errors:
        return None, errors
    try:
        result, errors = parse_upload(uploaded_file, filename, format, inline=True)
    except TooLargeToParseInline:
        return start_import(owner, name, filename, uploaded_file, format, heldout=heldout), []
    return _create_from_result(owner, name, filename, result, errors, heldout=heldout)


ACCEPTED_EXTENSIONS = (".jsonl", ".jsonl.gz")


def _check_upload_request(uploaded_file, name: str, format: str) -> tuple[str, str, list[dict]]:
    """`(filename, name, errors)`: the file a problem file by its name, the format known, the name fitting
    its column. A file of another type is refused before any of it is parsed, naming the accepted types."""
    filename = os.path.basename(getattr(uploaded_file, "name", None) or "upload.jsonl")
    if not filename.lower().endswith(ACCEPTED_EXTENSIONS):
        suffix = "".join(Path(filename).suffixes[-2:]) or "no extension"
        return filename, name, [_error(0, "file", f"{filename}: {suffix} is not a problem file; upload "
                                                  ".jsonl (JSON Lines, one problem per line) or .jsonl.gz "
                                                  "(the same, gzip-compressed)")]
    if format not in UPLOAD_FORMATS:
        return filename, name, [_error(0, "format", f"{format!r} is not one of {', '.join(UPLOAD_FORMATS)}")]
    name = (name or "").strip() or _name_from_filename(filename)
    problem = name_problem(name)
    if problem:
        return filename, name, [_error(0, "name", problem)]
    return filename, name, []


def _import_errors(filename: str, result, errors: list[dict]) -> list[dict]:
    """The errors to report for a parse: the refusal's, or the bad lines' (a file with no good problem says so)."""
    if result is None:
        return errors
    errors = [e.to_dict() for e in result.errors]
    if not result.problems and not errors:
        errors = [_error(0, None, f"{filename} has no problems")]
    return errors


def _create_from_result(owner, name: str, filename: str, result, errors: list[dict], *,
                        validate: bool = True, heldout: Heldout = None) -> tuple[ProblemSet | None, list[dict]]:
    errors = _import_errors(filename, result, errors)
    if result is None or not result.problems:
        return None, errors
    refused = environment_quota_errors(owner, result.problems)
    if refused:
        return None, errors + refused
    with transaction.atomic():
        problem_set = ProblemSet.objects.create(owner=owner, name=name, format=result.format,
                                                source_filename=filename[:255], import_errors=errors,
                                                **_heldout_fields(heldout))
        _store_problems(problem_set, result.problems)
    if validate:
        enqueue_validation(problem_set)
    log.info("problem set %s: %d problems from %s (%d bad lines)", problem_set.pk,
             problem_set.problem_count, filename, len(errors))
    return problem_set, errors


def _heldout_fields(heldout: Heldout) -> dict:
    share, seed = heldout if heldout is not None else (0.0, 0)
    return {"heldout_share": share, "heldout_seed": seed} if share > 0 else {}


def _name_from_filename(filename: str) -> str:
    stem = filename
    for suffix in (".gz", ".jsonl", ".json"):
        stem = stem.removesuffix(suffix)
    return stem[:200] or "problems"


def _store_problems(problem_set: ProblemSet, problems: Iterable) -> None:
    """Replace the set's problems by `problems` (sandbox `Problem`s) and refresh its counts. A problem the
    file marks `excluded` (an export of a set with excluded problems) is stored excluded: the row's column
    holds it, not `data` (``Problem.to_sandbox`` puts it back), so ``set_excluded`` has one thing to change."""
    problem_set.problems.all().delete()
    rows = [Problem(problem_set=problem_set, position=i, problem_id=db_safe(p.id), split=p.split, kind=p.kind,
                    tags=db_safe(list(p.tags)), data=db_safe(row_data(p)), excluded=p.excluded)
            for i, p in enumerate(problems)]
    curation.apply_heldout_share(problem_set, rows)  # a held-out share chosen at upload, for a file with none
    Problem.objects.bulk_create(rows, batch_size=500)
    problem_set.refresh_counts()


def row_data(problem) -> dict:
    """What a problem row's ``data`` holds of sandbox ``problem``: all but ``excluded`` (the row's column)."""
    data = problem.to_dict()
    data.pop("excluded", None)
    return data


def replace_problems(problem_set: ProblemSet, problems: list, *, format: str | None = None,
                     errors: list[dict] | None = None, validate: bool = True) -> ProblemSet:
    """Refresh a set's problems in place (its id, and so the runs that point at it, stay)."""
    with transaction.atomic():
        locked = ProblemSet.objects.select_for_update().get(pk=problem_set.pk)
        locked.replace_source(format=format, errors=errors)
        _store_problems(locked, problems)
    if validate:
        enqueue_validation(locked)
    return locked


# --- background import ------------------------------------------------------------------------


def upload_dir(problem_set_id: int) -> Path:
    return Path(settings.MEDIA_ROOT) / "problem-sets" / str(problem_set_id)


def start_import(owner, name: str, filename: str, uploaded_file, format: str, *, heldout: Heldout = None) -> ProblemSet:
    """Store the upload under MEDIA_ROOT and create its set `importing`; `problems.import_upload` is
    published once that commits. Nothing is created when the file cannot be stored."""
    with transaction.atomic():
        ps = ProblemSet.objects.create(owner=owner, name=name, format=format, source_filename=filename[:255],
                                       import_status=ProblemSet.Import.IMPORTING, **_heldout_fields(heldout))
        directory = upload_dir(ps.pk)
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = directory / "upload"
            size = 0
            with open(path, "wb") as out:  # chunk by chunk: Django spooled anything big to a temp file
                if hasattr(uploaded_file, "seek"):
                    uploaded_file.seek(0)
                for chunk in uploaded_file.chunks() if hasattr(uploaded_file, "chunks") else iter(
                        lambda: uploaded_file.read(1 << 20), b""):
                    out.write(chunk)
                    size += len(chunk)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        ps.attach_upload(str(path.relative_to(settings.MEDIA_ROOT)), size)
        transaction.on_commit(lambda: publish_import(ps.pk))
    log.info("problem set %s: %s (%d bytes) stored, importing on the sandbox queue", ps.pk, filename, size)
    return ps


IMPORT_JOB = RowJob("problems.import_upload", prefix="import", what="the import again for problem sets",
                    rows=lambda: ProblemSet.objects.filter(import_status=ProblemSet.Import.IMPORTING))
"""A set `importing`; a second copy of its task finds the import done and stops."""
import_task_id = IMPORT_JOB.task_id


def publish_import(problem_set_id: int) -> bool:
    """Publish `problems.import_upload`; False (logged) when the broker is down: the sweep publishes it again."""
    return IMPORT_JOB.publish_row(problem_set_id)


def import_problem_set(problem_set_id: int) -> ProblemSet | None:
    """Parse a stored upload into the set's problems (the body of `problems.import_upload`); idempotent.

    Progress (lines and bytes read) is stored as it goes. A file with no good problem leaves the set
    `failed` with its errors (the page lists them); a good one makes it `done` and queues validation.
    The stored upload is removed either way. Returns the set, or None when it no longer exists.
    """
    ps = ProblemSet.objects.filter(pk=problem_set_id).first()
    if ps is None:
        shutil.rmtree(upload_dir(problem_set_id), ignore_errors=True)  # deleted while it was queued
        return None
    if not ps.importing:
        return ps  # a redelivered task: the work is done
    last, lines_read = 0.0, 0

    def progress(lines: int, read_bytes: int) -> None:
        nonlocal last, lines_read
        lines_read = lines
        if time.monotonic() - last < IMPORT_PROGRESS_INTERVAL_S:
            return
        last = time.monotonic()
        ps.record_import_progress(lines, read_bytes)
        notify_import(ps)

    path = Path(settings.MEDIA_ROOT) / ps.upload_path
    try:
        with open(path, "rb") as f:
            result, errors = parse_upload(f, ps.source_filename or path.name, ps.format, progress)
    except OSError as exc:
        result, errors = None, [_error(0, "file", f"the stored upload could not be read ({exc.strerror})")]
    errors = _import_errors(ps.source_filename, result, errors)
    if result is not None and result.problems:
        refused = environment_quota_errors(ps.owner, result.problems, exclude_set_id=ps.pk)
        if refused:
            result, errors = None, errors + refused
    with transaction.atomic():
        locked = ProblemSet.objects.select_for_update().filter(pk=problem_set_id).first()
        if locked is None or not locked.importing:
            return locked  # deleted meanwhile, or another copy of the task finished first
        imported = result is not None and bool(result.problems)
        if imported:
            _store_problems(locked, result.problems)
        locked.end_import(errors=errors, lines=lines_read, format=result.format if imported else None)
        if locked.import_status == ProblemSet.Import.DONE:
            locked = enqueue_validation(locked)
        # The rows are the set from now on; the file goes once they are committed.
        transaction.on_commit(lambda: shutil.rmtree(upload_dir(problem_set_id), ignore_errors=True))
    notify_import(locked)
    log.info("problem set %s: import %s, %d problems, %d errors", locked.pk, locked.import_status,
             locked.problem_count, len(errors))
    return locked


def import_state(ps: ProblemSet, *, errors: bool = True) -> dict:
    """The API's `import` object (and the `import` notification's fields)."""
    state = {"status": ps.import_status, "read_bytes": ps.import_read_bytes, "total_bytes": ps.import_total_bytes,
             "lines": ps.import_lines, "problems": None if ps.importing else ps.problem_count,
             "in_progress": ps.importing, "progress_text": ps.import_text}
    if errors:
        state["errors"] = ps.import_errors
    return state


def validation_state(ps: ProblemSet) -> dict:
    """The API's `validation` summary (and the `validation` notification's fields): the counts, and the
    badge and line the pages show (`ProblemSet.validation_badge`, `validation_text`)."""
    state, text = ps.validation_badge
    return {"status": ps.validation_status, "passed": ps.validation_passed, "failed": ps.validation_failed,
            "checked": ps.validation_checked, "total": ps.problem_count, "in_progress": ps.validation_in_progress,
            "badge": {"state": state, "text": text}, "progress_text": ps.validation_text}


def list_row(ps: ProblemSet) -> dict:
    """How the set list shows the set's progress: its validation badge, the line beside it, and whether
    an import or validation is still under way."""
    state, text = ps.validation_badge
    return {"badge": {"state": state, "text": text}, "text": ps.list_text, "in_progress": ps.in_progress}


def notify_import(ps: ProblemSet) -> None:
    """Tell the owner's open pages how far the import got (group `user-<id>`, /ws/notifications/)."""
    notify_owner(ps, {"event": "import", "problem_set": ps.pk, **import_state(ps, errors=False),
                      "list_row": list_row(ps)})


# --- validation -------------------------------------------------------------------------------


def enqueue_validation(problem_set: ProblemSet) -> ProblemSet:
    """Mark the set pending and queue `problems.validate` once this transaction commits.

    Each request bumps `validation_generation`: a task started for an older request stops or
    discards its results, so a re-validation during a running one never loses to it.
    """
    with transaction.atomic():
        generation = problem_set.request_validation()
        transaction.on_commit(lambda: publish_validation(problem_set.pk, generation))
    return problem_set


def validation_task_id(problem_set_id: int, generation: int) -> str:
    """One id per validation request, so the sweep can tell whether the broker still holds its task."""
    return f"validate-{problem_set_id}-{generation}"


def _pending_validations() -> Iterable[Pending]:
    pending = (ProblemSet.objects.filter(validation_status=ProblemSet.Validation.PENDING,
                                         import_status=ProblemSet.Import.DONE)
               .values_list("pk", "validation_generation"))
    for pk, generation in pending:
        yield Pending(pk, validation_task_id(pk, generation), (pk, generation))


VALIDATION_JOB = DurableJob("problems.validate", pending=_pending_validations,
                            what="the validation again for problem sets")
"""A set pending validation; a second copy of its task finds the set's generation validated (or under
way) and does nothing new."""


def publish_validation(problem_set_id: int, generation: int) -> bool:
    """Publish `problems.validate`; False (logged) when the broker is down: the set stays pending and
    the sweep publishes it again."""
    return VALIDATION_JOB.publish(problem_set_id, generation, task_id=validation_task_id(problem_set_id, generation))


def validation_runner():
    """The sandbox `Runner` validation uses (a context manager; reuse it across `check_problems` calls):
    the service replicas of CRUCIBLE_SANDBOX_ENDPOINTS when that is set, else a local pool."""
    from sandbox.remote import make_runner

    backend = getattr(settings, "SANDBOX_BACKEND", None) or env.read("CRUCIBLE_SANDBOX_BACKEND")
    # Cold: a fresh sandbox per execution. Validation is the set's trust anchor, not a throughput
    # path (the 194 demo problems take seconds on 2 workers), so it takes the most independent mode.
    mode = getattr(settings, "SANDBOX_VALIDATION_MODE", "cold")
    return make_runner(backend=backend, workers=validation_workers(), mode=mode)


def validation_workers() -> int:
    return getattr(settings, "SANDBOX_WORKERS", None) or max(1, min(4, os.cpu_count() or 1))


def check_problems(problems: list, runner=None) -> list[ProblemCheck]:
    """Each reference solution and an empty solution through the sandbox, in one batch (the sandbox's
    own check, `sandbox.checks.run_checks`)."""
    from sandbox.checks import run_checks

    if runner is None:
        with validation_runner() as runner:
            return run_checks(problems, runner)
    return run_checks(problems, runner)


def _stored(result) -> dict | None:
    if result is None:
        return None
    d = result.to_dict()
    for stream in ("stdout", "stderr"):
        if len(d[stream]) > STORED_STREAM_CHARS:
            d[stream] = d[stream][:STORED_STREAM_CHARS]
            d[f"{stream}_truncated"] = True
    return d


def validate_problem_set(problem_set_id: int, generation: int | None = None, *,
                         force: bool = False) -> ProblemSet | None:
    """Do the validation of one set (the body of the `problems.validate` task); idempotent.

    A set already `done`/`failed` for this generation is left alone unless `force`; a task for an
    older generation does nothing. Returns the set, or None when it no longer exists.
    """
    with transaction.atomic():
        ps = ProblemSet.objects.select_for_update().filter(pk=problem_set_id).first()
        if ps is None:
            return None
        generation = ps.validation_generation if generation is None else generation
        if generation != ps.validation_generation:
            log.info("problem set %s: validation %s superseded by %s", ps.pk, generation, ps.validation_generation)
            return ps
        if not ps.start_validation(generation, force=force):
            return ps  # a redelivered task: the work is done
        ProblemValidation.objects.filter(problem__problem_set=ps).delete()
    notify_validation(ps)

    # Chunks, each stored as it finishes: a 20,000-problem set takes minutes, and the page and the
    # API show how far it got instead of `passed 0, failed 0` until the end.
    chunk = getattr(settings, "SANDBOX_VALIDATION_CHUNK", None) or max(VALIDATION_CHUNK_MIN, validation_workers() * 8)
    ids = list(ps.problems.order_by("position").values_list("pk", flat=True))
    try:
        with validation_runner() as runner:
            for start in range(0, len(ids), chunk):
                rows = list(Problem.objects.filter(pk__in=ids[start:start + chunk]).order_by("position"))
                checks = check_problems([row.to_sandbox() for row in rows], runner)
                if not _record_checks(ps.pk, generation, rows, checks):
                    return ps  # deleted, or re-validation requested meanwhile: that task does the rest
    except Exception as exc:  # the sandbox is broken or missing: the set says why, the worker lives on
        log.exception("problem set %s: validation failed", ps.pk)
        return _finish(ps.pk, generation, error=f"{type(exc).__name__}: {exc}")
    return _finish(ps.pk, generation)


def _record_checks(problem_set_id: int, generation: int, rows: list, checks: list[ProblemCheck]) -> bool:
    """Store one chunk's verdicts and progress; False when the set is gone or a newer validation owns it."""
    passed = sum(1 for c in checks if c.ok)
    with transaction.atomic():
        ps = ProblemSet.objects.filter(pk=problem_set_id).first()
        try:
            if ps is None or not ps.record_validation_chunk(generation, checked=len(checks), passed=passed):
                return False
        except TransitionError as exc:  # a second copy of this task (redelivered) ended the validation
            log.warning("%s; this copy of the task stops", exc)
            return False
        ProblemValidation.objects.bulk_create([
            ProblemValidation(problem=row, reference_passed=c.reference_passed, empty_failed=c.empty_failed,
                              detail=db_safe(c.detail), reference_result=db_safe(_stored(c.reference)),
                              empty_result=db_safe(_stored(c.empty)))
            for row, c in zip(rows, checks)], batch_size=200)
    notify_validation(ps)
    return True


def _finish(problem_set_id: int, generation: int, *, error: str = "") -> ProblemSet | None:
    ps = ProblemSet.objects.filter(pk=problem_set_id).first()
    try:
        if ps is None or not ps.finish_validation(generation, error):
            return ps  # deleted, or re-validation requested meanwhile: that task writes the results
    except TransitionError as exc:  # a second copy of this task (redelivered) ended it first
        log.warning("%s; this copy of the task stops", exc)
        return ps
    notify_validation(ps)
    return ps


def notify_validation(ps: ProblemSet) -> None:
    """Tell the owner's open pages (group `user-<id>`, /ws/notifications/) that the status changed."""
    notify_owner(ps, {"event": "validation", "problem_set": ps.pk, **validation_state(ps), "list_row": list_row(ps)})


def notify_owner(ps: ProblemSet, payload: dict) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(user_group(ps.owner_id), {"type": "notify", "payload": payload})
    except Exception:  # a notification is a courtesy: pages also poll, and the rows are written
        log.warning("problem set %s: could not send the %s notification", ps.pk, payload["event"], exc_info=True)


# --- export and delete ------------------------------------------------------------------------


def sandbox_problems(problem_set: ProblemSet) -> list:
    """The set's problems that runs and probes use (not the excluded ones) as sandbox `Problem`s, in upload
    order."""
    return [row.to_sandbox() for row in problem_set.problems.filter(excluded=False).order_by("position")]


def dump_problem_set(problem_set: ProblemSet, fileobj: IO) -> int:
    """Write the problems runs and probes use (no excluded one, so no line says `excluded`) as native JSON
    Lines to a text or binary file object; returns the count. The export is ``views.export_lines``."""
    from sandbox.formats import dump_problems

    return dump_problems(sandbox_problems(problem_set), fileobj)


def write_problems_jsonl(problem_set: ProblemSet, path: str | os.PathLike) -> Path:
    """Write the set as a native JSONL file at `path` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        dump_problem_set(problem_set, f)
    os.replace(tmp, path)  # readers never see half a file
    return path


def active_runs(problem_set: ProblemSet):
    """Runs (queued, running or cancelling) that use the set; empty before runs know problem sets."""
    runs = getattr(problem_set, "runs", None)
    if runs is None:
        return []
    return list(runs.active())


def delete_problem_set(problem_set: ProblemSet) -> None:
    """Delete the set and its problems; raises ProblemSetInUse while an active run uses it."""
    with transaction.atomic():
        locked = ProblemSet.objects.select_for_update().get(pk=problem_set.pk)
        in_use = active_runs(locked)
        if in_use:
            names = ", ".join(f"#{r.pk} {r.name} ({r.status})" for r in in_use[:5])
            raise ProblemSetInUse(f"problem set {locked.name!r} is used by {len(in_use)} active "
                                  f"run(s): {names}; cancel them or wait until they finish")
        locked.delete()
        # An import still queued finds no set and stops; its stored upload goes now, and so do its
        # probes' files (a probe under way sees its row gone and stops; runs hold their own copy).
        transaction.on_commit(lambda: shutil.rmtree(upload_dir(problem_set.pk), ignore_errors=True))
        transaction.on_commit(lambda: shutil.rmtree(Path(settings.PROBLEM_SETS_DIR) / str(problem_set.pk),
                                                    ignore_errors=True))
