"""`/api/problem-sets`: upload, list, validation report, export, re-validate, delete (docs/design.md "Web
(webapp/)": the JSON API table); `POST .../probe` is the probes app's (webapp.probes.api)."""
from __future__ import annotations

from django.http import HttpRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, File, Form, Router, Schema
from ninja.responses import Status
from ninja.files import UploadedFile

from webapp.core.queueing import QueuePlaceOut

from . import curation, services
from .models import ProblemSet
from .views import export_filename, export_lines

router = Router(tags=["problem sets"])


class LineError(Schema):
    line: int
    field: str | None
    message: str


class ImportState(Schema):
    status: str = Field(description="importing | done | failed")
    read_bytes: int = Field(description="bytes of the upload read so far")
    total_bytes: int = Field(description="size of the upload as sent (0 when it was imported in the request)")
    lines: int = Field(description="lines read so far")
    problems: int | None = Field(description="problems imported; null while importing")


class ImportProgress(ImportState):
    in_progress: bool = Field(description="the import is under way")
    progress_text: str = Field(description="the set page's line while importing (lines and bytes read); empty after")


class ImportReport(ImportProgress):
    errors: list[LineError]


class Created(Schema):
    id: int
    name: str
    problems: int | None = Field(description="null while a large upload is imported in the background (202)")
    heldout_share: float | None = Field(None, description="the held-out share chosen at upload; null when none was "
                                                          "asked or the file brings its own held-out split")
    format: str
    errors: list[LineError]
    import_: ImportState = Field(alias="import")


class Refused(Schema):
    detail: str
    errors: list[LineError] = []


class Splits(Schema):
    train: int
    heldout: int


class ValidationRow(Schema):
    problem_id: str
    reference_passed: bool
    empty_failed: bool
    detail: str
    excluded: bool = Field(False, description="left out of the runs launched since it was excluded")


class Badge(Schema):
    state: str = Field(description="the badge's look (CSS class status-<state>): the validation status, or "
                                   "warning when a finished validation has failing problems")
    text: str = Field(description="the badge's text")


class ListRow(Schema):
    badge: Badge
    text: str = Field(description="the set list's line beside the badge")
    in_progress: bool = Field(description="an import or validation of the set is under way")


class Validation(Schema):
    status: str
    passed: int
    failed: int
    checked: int = Field(description="problems checked so far (progress while running)")
    total: int = Field(description="problems in the set")
    in_progress: bool = Field(description="pending or running")
    badge: Badge
    progress_text: str = Field(description="the set page's line beside the badge")
    error: str
    results: list[ValidationRow]


class ProbeRow(Schema):
    problem_id: str
    solve_rate: float = Field(description="passed / samples: the share of the samples that passed every test")
    pass_rate: float = Field(description="the same as solve_rate, under its name before the rename")
    passed: int
    samples: int


class ProbeState(Schema):
    id: int
    status: str = Field(description="pending | running | done | failed")
    model: str = Field(description="the model as it was named (models/<name>, org/name or run:<id>/step-<n>)")
    adapter: str | None = Field(description="an adapter checkpoint run:<id>/step-<n> applied on top of model")
    samples: int = Field(description="candidates sampled per problem")
    done: int = Field(description="problems probed so far (progress)")
    total: int = Field(description="problems to probe")
    error: str
    summary: dict | None = Field(description="the probe's summary line: problems, unsolved, solved, "
                                              "mean_solve_rate (and mean_pass_rate, its name before the rename)")
    reference: str = Field(description="how a run config names this probe: difficulty.probe")
    created: str
    finished: str | None
    in_progress: bool = Field(description="pending or running")
    progress_text: str = Field(description="the set page's line while the probe is under way; empty after")
    queue: QueuePlaceOut | None = Field(None, description="while pending: where it stands on its queue and what "
                                                          "it waits for")
    results: list[ProbeRow] = Field(description="per problem, in the set's order, once done")


class FieldError(Schema):
    detail: str
    field: str


class _Set(Schema):
    id: int
    name: str
    problems: int
    format: str
    created: str
    owner: str
    splits: Splits = Field(description="included problems per split (excluded ones are not counted)")
    excluded: int = Field(0, description="problems excluded from runs (kept in the set)")
    heldout_share: float | None = Field(None, description="the share chosen as held-out (seeded) for a set whose "
                                                          "file brought none; null: the file's own splits")
    heldout_seed: int = Field(0, description="the seed of that choice")


class Summary(_Set):
    validation: dict
    import_: ImportProgress = Field(alias="import")
    list_row: ListRow


class Detail(_Set):
    source_filename: str
    import_errors: list[LineError]
    validation: Validation
    import_: ImportReport = Field(alias="import")
    probe: ProbeState | None = Field(description="the set's latest difficulty probe; null before the first")


class Message(Schema):
    detail: str


class HeldoutIn(Schema):
    share: float = Field(description=f"0 to {curation.MAX_HELDOUT_SHARE}: this share of the problems becomes "
                                     "held-out (0: all train)")
    seed: int = Field(0, description="the same set, share and seed choose the same problems")


class ExcludeIn(Schema):
    excluded: bool = Field(True, description="true: runs launched afterwards skip the problem; false: include it")


def request_user(request: HttpRequest):
    return request.auth if hasattr(request.auth, "is_staff") else request.user


def visible_sets(request: HttpRequest):
    return ProblemSet.objects.visible_to(request_user(request))


def _summary(ps: ProblemSet) -> dict:
    return {"id": ps.pk, "name": ps.name, "problems": ps.problem_count, "format": ps.format,
            "created": ps.created.isoformat(), "owner": ps.owner.username,
            "splits": {"train": ps.train_count, "heldout": ps.heldout_count}, "excluded": ps.excluded_count,
            "heldout_share": ps.heldout_share, "heldout_seed": ps.heldout_seed,
            "validation": services.validation_state(ps),
            "import": services.import_state(ps, errors=False), "list_row": services.list_row(ps)}


@router.post("", response={201: Created, 202: Created, 400: Refused}, by_alias=True, summary="Upload a problem set",
             description="Multipart `file` (.jsonl or .jsonl.gz), `name` (defaults to the file name) and "
                         "`format` (auto, native, humaneval, mbpp, apps, codecontests). Bad lines are "
                         "reported as {line, field, message} (1-based; 0 = the whole file) while the good "
                         "problems are kept; a file with no good problem is refused with 400. An upload "
                         "whose text is past CRUCIBLE_UPLOAD_INLINE_MB answers 202 with `problems: null` "
                         "and `import.status: importing`: a sandbox worker imports it, and "
                         "GET /api/problem-sets/{id} follows `import` (progress, then its errors).")
def upload(request: HttpRequest, file: File[UploadedFile] = None, name: Form[str] = "",
           format: Form[str] = "auto", heldout_share: Form[float] = 0.0, heldout_seed: Form[int] = 0):
    if getattr(request, "upload_too_large", False):
        return Status(400, {"detail": f"upload refused: {services.too_large_message('the file')}", "errors": []})
    if file is None:
        return Status(400, {"detail": "no file: send the problems as the multipart field `file`", "errors": []})
    try:
        curation.check_share(heldout_share, heldout_seed)
    except curation.CurationError as exc:
        return Status(400, {"detail": f"upload refused: {exc}", "errors": []})
    heldout = (heldout_share, heldout_seed) if heldout_share > 0 else None
    problem_set, errors = services.upload_problem_set(request_user(request), name, file, format, heldout=heldout)
    if problem_set is None:
        first = errors[0] if errors else {"line": 0, "field": None, "message": "no problems"}
        where = f"line {first['line']}: " if first["line"] else ""
        field = f"{first['field']}: " if first["field"] else ""
        reason = f"{where}{field}{first['message']}"
        return Status(400, {"detail": f"upload refused, no problem could be imported ({reason})",
                            "errors": errors})
    state = services.import_state(problem_set, errors=False)
    return Status(202 if problem_set.importing else 201,
                  {"id": problem_set.pk, "name": problem_set.name, "problems": state["problems"],
                   "format": problem_set.format, "errors": errors, "import": state,
                   "heldout_share": problem_set.heldout_share})


@router.get("", response=list[Summary], by_alias=True, summary="The user's problem sets (staff: everyone's)")
def list_sets(request: HttpRequest):
    return [_summary(ps) for ps in visible_sets(request).select_related("owner")]


@router.get("/{int:problem_set_id}", response=Detail, by_alias=True,
            summary="A problem set, its import and its validation report",
            description="`results=false` leaves out the per-problem rows (for polling).")
def detail(request: HttpRequest, problem_set_id: int, results: bool = True):
    ps = get_object_or_404(visible_sets(request).select_related("owner"), pk=problem_set_id)
    rows = []
    if results:
        for problem in ps.problems.select_related("validation").order_by("position"):
            v = getattr(problem, "validation", None)
            if v is not None:
                rows.append({"problem_id": problem.problem_id, "reference_passed": v.reference_passed,
                             "empty_failed": v.empty_failed, "detail": v.detail, "excluded": problem.excluded})
    out = _summary(ps)
    out.update(source_filename=ps.source_filename, import_errors=ps.import_errors,
               validation={**out["validation"], "error": ps.validation_error, "results": rows},
               **{"import": services.import_state(ps)},
               probe=_probe_state(ps.latest_probe(), results=results))
    return out


def _probe_state(probe, *, results: bool) -> dict | None:
    return probe.state(results=results) if probe is not None else None


@router.get("/{int:problem_set_id}/export", summary="The problems as native JSON Lines",
            response={200: None}, openapi_extra={"responses": {200: {"content": {"application/x-ndjson": {}}}}})
def export(request: HttpRequest, problem_set_id: int):
    ps = get_object_or_404(visible_sets(request), pk=problem_set_id)
    response = StreamingHttpResponse(export_lines(ps), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{export_filename(ps)}"'
    return response


@router.post("/{int:problem_set_id}/validate", response={202: Summary, 409: Message}, by_alias=True,
             summary="Validate the set again (409 while it is being imported)")
def revalidate(request: HttpRequest, problem_set_id: int):
    ps = get_object_or_404(visible_sets(request).select_related("owner"), pk=problem_set_id)
    if ps.import_status != ProblemSet.Import.DONE:
        return Status(409, {"detail": f"problem set {ps.pk} has no problems to validate (import {ps.import_status})"})
    return Status(202, _summary(services.enqueue_validation(ps)))


@router.post("/{int:problem_set_id}/heldout", response={200: Summary, 400: Message, 409: Message}, by_alias=True,
             summary="Choose a held-out share (seeded) for a set whose file brought no held-out problems",
             description="Sets each problem's split: round(share x problems) held-out (at least one when share > 0, "
                         "never all), chosen by a hash of the seed and the problem id; 0 puts all back in train. "
                         "409 when the file brings its own held-out split or the set is being imported. Runs "
                         "launched afterwards use the new split.")
def heldout(request: HttpRequest, problem_set_id: int, payload: HeldoutIn):
    ps = get_object_or_404(visible_sets(request).select_related("owner"), pk=problem_set_id)
    try:
        curation.check_share(payload.share, payload.seed)
    except curation.CurationError as exc:
        return Status(400, {"detail": str(exc)})
    try:
        changed = curation.set_heldout_share(ps, payload.share, payload.seed)
    except curation.CurationError as exc:
        return Status(409, {"detail": str(exc)})
    return Status(200, _summary(changed))


@router.post("/{int:problem_set_id}/problems/{path:problem_id}/exclude", response={200: Summary}, by_alias=True,
             summary="Exclude a problem from runs launched afterwards (it stays in the set), or include it again",
             description="`problem_id` is the uploaded id, URL-encoded.")
def exclude(request: HttpRequest, problem_set_id: int, problem_id: str, payload: ExcludeIn):
    ps = get_object_or_404(visible_sets(request).select_related("owner"), pk=problem_set_id)
    problem = get_object_or_404(ps.problems, problem_id=problem_id)
    return Status(200, _summary(curation.set_excluded(ps, problem, payload.excluded)))


@router.delete("/{int:problem_set_id}", response={204: None, 409: Message},
               summary="Delete a problem set (409 while a queued, running or cancelling run uses it)")
def delete(request: HttpRequest, problem_set_id: int):
    ps = get_object_or_404(visible_sets(request), pk=problem_set_id)
    services.delete_problem_set(ps)
    return Status(204, None)

