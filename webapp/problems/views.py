"""Problem-set pages: list + upload, detail (validation, search), one problem, export, delete."""
from __future__ import annotations

import io
import re

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.core.highlight import highlight_python

from . import curation, services
from .forms import HeldoutForm, ProblemFilterForm, UploadForm
from .models import Problem, ProblemSet
from .uploads import UploadLimitHandler

PAGE_SIZE = 50
SHOWN_TEST_CASES = 20


def visible_sets(request: HttpRequest):
    return ProblemSet.objects.visible_to(request.user).select_related("owner")


@csrf_exempt  # CSRF is checked below, after the size-limiting upload handler is in place
@require_http_methods(["GET", "POST"])
def problem_set_list(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        # Must precede the first read of request.POST/FILES (CsrfViewMiddleware would read them).
        request.upload_handlers.insert(0, UploadLimitHandler(request, settings.UPLOAD_MAX_BYTES))
    return _problem_set_list(request)


@csrf_protect
def _problem_set_list(request: HttpRequest) -> HttpResponse:
    errors: list[dict] = []
    status = 200
    if request.method == "POST":
        form = UploadForm(request.POST, request.FILES)
        if getattr(request, "upload_too_large", False):
            form.is_valid()
            form.errors.pop("file", None)
            errors = [{"line": 0, "field": "file", "message": services.too_large_message("the file")}]
            status = 413
        elif form.is_valid():
            problem_set, errors = services.upload_problem_set(
                request.user, form.cleaned_data["name"], form.cleaned_data["file"], form.cleaned_data["format"],
                heldout=form.heldout())
            if problem_set is not None and form.heldout() and not problem_set.importing \
                    and problem_set.heldout_share is None:
                messages.warning(request, f"The file brings its own held-out split "
                                          f"({curation.own_split_words(problem_set)}): the held-out share was not "
                                          "applied.")
            if problem_set is not None and problem_set.importing:
                messages.info(request, "Uploaded. The file is large, so a sandbox worker imports it; this page "
                                       "follows its progress, and validation starts when it is done.")
                return redirect("problems:detail", problem_set.pk)
            if problem_set is not None:
                note = f"Imported {problem_set.problem_count} problems (format {problem_set.format})."
                if errors:
                    messages.warning(request, f"{note} {len(errors)} lines were refused; they are listed below.")
                else:
                    messages.success(request, f"{note} Validation is queued.")
                return redirect("problems:detail", problem_set.pk)
            status = 400
        else:
            status = 400
        if "file" in form.errors:  # every refusal of the file shows in one place, under the form
            errors = [{"line": 0, "field": "file", "message": m} for m in form.errors.pop("file")] + errors
    else:
        form = UploadForm()
        if request.GET.get("upload") == "too-large":  # sent here by the ASGI body guard (uploads.py)
            errors = [{"line": 0, "field": "file", "message": services.too_large_message("the file")}]
    return render(request, "problems/list.html", {
        "form": form, "errors": errors, "problem_sets": visible_sets(request),
        "upload_max_mb": settings.UPLOAD_MAX_BYTES / 2**20,
    }, status=status)


def filtered_problems(problem_set: ProblemSet, params) -> tuple[ProblemFilterForm, object]:
    form = ProblemFilterForm(params)
    problems = problem_set.problems.select_related("validation").order_by("position")
    if form.is_valid():
        q = form.cleaned_data["q"].strip()
        if q:
            problems = problems.filter(Q(problem_id__icontains=q) | Q(data__prompt__icontains=q)
                                       | Q(tags__icontains=q))
        if form.cleaned_data["split"]:
            problems = problems.filter(split=form.cleaned_data["split"])
        verdict = form.cleaned_data["verdict"]
        if verdict == "passing":
            problems = problems.filter(validation__reference_passed=True, validation__empty_failed=True)
        elif verdict == "failing":
            problems = problems.filter(Q(validation__reference_passed=False) | Q(validation__empty_failed=False))
    return form, problems


@require_GET
def problem_set_detail(request: HttpRequest, pk: int) -> HttpResponse:
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    form, problems = filtered_problems(problem_set, request.GET)
    page = Paginator(problems, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "problems/detail.html", {
        "ps": problem_set, "form": form, "page": page, "query": query.urlencode(),
        "in_use": services.active_runs(problem_set), "heldout_form": _heldout_form(problem_set),
        **probe_context(request, problem_set, page),
    })


def _heldout_form(problem_set: ProblemSet) -> HeldoutForm:
    return HeldoutForm(initial={"share": problem_set.heldout_share or 0.2, "seed": problem_set.heldout_seed})


@require_POST
def problem_set_heldout(request: HttpRequest, pk: int) -> HttpResponse:
    """The set page's held-out share: that share of a set without held-out problems becomes held-out (seeded)."""
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    form = HeldoutForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{name}: {' '.join(e)}" for name, e in form.errors.items())
        messages.error(request, f"Held-out share not changed: {errors}")
        return redirect("problems:detail", pk)
    try:
        changed = curation.set_heldout_share(problem_set, form.cleaned_data["share"], form.cleaned_data["seed"])
    except curation.CurationError as exc:
        messages.error(request, f"Held-out share not changed: {exc}.")
    else:
        messages.success(request, f"{changed.heldout_count} problem{'s' if changed.heldout_count != 1 else ''} "
                                  f"held out, {changed.train_count} to train on (seed {changed.heldout_seed}); "
                                  "runs launched from now on use this split.")
    return redirect("problems:detail", pk)


@require_POST
def problem_exclude(request: HttpRequest, pk: int, problem_pk: int) -> HttpResponse:
    """Exclude a problem from runs launched afterwards (``excluded=1``) or include it again (``excluded=0``)."""
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    problem = get_object_or_404(Problem, problem_set=problem_set, pk=problem_pk)
    excluded = request.POST.get("excluded", "1") != "0"
    curation.set_excluded(problem_set, problem, excluded)
    now = "excluded: runs launched from now on skip it" if excluded else "included again"
    messages.success(request, f"{problem.problem_id} is {now} (it stays in the set).")
    back = request.POST.get("next", "")
    return redirect(back if back.startswith(f"/problem-sets/{pk}/") else reverse("problems:detail", args=[pk]))


SHOWN_PROBE_IDS = 200


def probe_context(request: HttpRequest, problem_set: ProblemSet, page) -> dict:
    """The set page's difficulty card: the latest probe (progress while it runs), the latest finished one
    (histogram, never/always solved lists, the table's pass-rate column); its form is the probes app's
    (the template's ``probe_form`` tag)."""
    latest = problem_set.latest_probe()
    finished = latest if latest is not None and latest.status == "done" else problem_set.latest_finished_probe()
    context = {"probe": latest, "probe_done": finished}
    if finished is not None:
        rates = finished.solve_rates()
        for row in page:  # the page's rows are a list from here on: the template sees these attributes
            row.probe_rate = rates.get(row.problem_id)
        unsolved = [r["problem_id"] for r in finished.results if r["passed"] == 0]
        solved = [r["problem_id"] for r in finished.results if r["passed"] == r["samples"]]
        context.update(
            probe_unsolved=unsolved[:SHOWN_PROBE_IDS], probe_unsolved_more=max(0, len(unsolved) - SHOWN_PROBE_IDS),
            probe_solved=solved[:SHOWN_PROBE_IDS], probe_solved_more=max(0, len(solved) - SHOWN_PROBE_IDS),
            probe_chart={"rates": list(rates.values()), "samples": finished.samples})
    return context


@require_GET
def problem_detail(request: HttpRequest, pk: int, problem_pk: int) -> HttpResponse:
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    problem = get_object_or_404(Problem.objects.select_related("validation"), problem_set=problem_set, pk=problem_pk)
    data = problem.data
    validation = getattr(problem, "validation", None)
    cases = data.get("test_cases") or []
    reference = data.get("reference_solution") or ""
    return render(request, "problems/problem.html", {
        "ps": problem_set, "problem": problem, "data": data, "validation": validation,
        "reference_html": highlight_python(reference) if reference else "",
        "setup_html": highlight_python(data.get("setup") or ""),
        "tests_html": highlight_python("\n".join(data.get("tests") or [])),
        "test_cases": cases[:SHOWN_TEST_CASES], "more_test_cases": max(0, len(cases) - SHOWN_TEST_CASES),
    })


@require_GET
def problem_set_export(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    response = StreamingHttpResponse(export_lines(problem_set), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{export_filename(problem_set)}"'
    return response


def export_lines(problem_set: ProblemSet):
    """Native JSON Lines, one problem at a time (sets can be large): every problem, an excluded one with
    `"excluded": true`, so a re-upload of the file keeps it out of runs."""
    from sandbox.formats import dump_problems

    for row in problem_set.problems.order_by("position").iterator(chunk_size=500):
        buf = io.StringIO()
        dump_problems([row.to_sandbox()], buf)
        yield buf.getvalue().encode("utf-8")


def export_filename(problem_set: ProblemSet) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", problem_set.name).strip("-.")
    return (stem or f"problem-set-{problem_set.pk}") + ".jsonl"


@require_POST
def problem_set_delete(request: HttpRequest, pk: int) -> HttpResponse:
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    try:
        services.delete_problem_set(problem_set)
    except services.ProblemSetInUse as exc:
        messages.error(request, f"Not deleted: {exc}.")
        return redirect("problems:detail", pk)
    messages.success(request, f"Deleted problem set {problem_set.name!r}.")
    return redirect("problems:list")


@require_POST
def problem_set_validate(request: HttpRequest, pk: int) -> HttpResponse:
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    if problem_set.import_status != ProblemSet.Import.DONE:
        messages.error(request, f"Not validated: the import is {problem_set.import_status}.")
        return redirect("problems:detail", pk)
    services.enqueue_validation(problem_set)
    messages.success(request, "Validation queued.")
    return redirect("problems:detail", pk)
