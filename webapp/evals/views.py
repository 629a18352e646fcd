"""The evaluations pages: the list with the comparison table per benchmark and the "New evaluation" form,
an evaluation with its per-problem table, one problem's samples; the run page's before/after button."""
from __future__ import annotations

from collections import OrderedDict

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from training.config import ConfigError

from webapp.core.refusals import add_refusal
from webapp.runs.models import Run

from . import services
from .forms import BenchmarkFields, EvalForm
from .models import EvalProblem, Evaluation


def comparison(evaluations) -> list[dict]:
    """Per benchmark (newest first): its evaluations side by side, with one column per k any of them has."""
    groups: OrderedDict[str, list[Evaluation]] = OrderedDict()
    for e in evaluations:
        groups.setdefault(e.benchmark, []).append(e)
    tables = []
    for benchmark, rows in groups.items():
        ks = sorted({int(k) for e in rows for k in (e.pass_at_k or {})})
        tables.append({"benchmark": benchmark, "title": rows[0].benchmark_title, "ks": ks,
                       "rows": [{"e": e, "pass_at_k": [(e.pass_at_k or {}).get(str(k)) for k in ks]} for e in rows]})
    return tables


def _page(request: HttpRequest, form: EvalForm, status: int = 200) -> HttpResponse:
    found = Evaluation.objects.visible_to(request.user).select_related("problem_set", "run")
    benchmark = request.GET.get("benchmark") or None
    evaluations = [e for e in found[:500] if benchmark is None or e.benchmark == benchmark]
    return render(request, "evals/list.html", {"form": form, "tables": comparison(evaluations),
                                               "benchmark": benchmark}, status=status)


def evaluations(request: HttpRequest) -> HttpResponse:
    initial = {"model": request.GET["model"]} if request.GET.get("model") else {}
    return _page(request, EvalForm(user=request.user, initial=initial))


@require_POST
def create(request: HttpRequest) -> HttpResponse:
    form = EvalForm(request.POST, user=request.user)
    if form.is_valid():
        data = form.cleaned_data
        try:
            evaluation = services.request_evaluation(request.user, model=data["model"], samples=data["samples"],
                                                     ks=data["ks"], seed=data["seed"], **form.target())
        except (ConfigError, services.EvalConflict) as exc:
            add_refusal(form, exc)
        else:
            messages.success(request, "Evaluation queued on the gpu workers.")
            return redirect("evals:detail", evaluation.pk)
    return _page(request, form, status=400)


def detail(request: HttpRequest, pk: int) -> HttpResponse:
    evaluation = get_object_or_404(Evaluation.objects.visible_to(request.user).select_related("problem_set", "run"),
                                   pk=pk)
    problems = list(evaluation.problems.all())
    ks = sorted(int(k) for k in (evaluation.ks or []) if int(k) != 1)
    rows = [{"p": p, "pass_at_k": [(p.pass_at_k or {}).get(str(k)) for k in ks]} for p in problems]
    return render(request, "evals/detail.html", {"e": evaluation, "rows": rows, "ks": ks,
                                                 "pass_at_k": [(evaluation.pass_at_k or {}).get(str(k)) for k in ks]})


def problem(request: HttpRequest, pk: int, problem_id: str) -> HttpResponse:
    evaluation = get_object_or_404(Evaluation.objects.visible_to(request.user), pk=pk)
    row = get_object_or_404(EvalProblem, evaluation=evaluation, problem_id=problem_id)
    candidates = []
    for index, c in enumerate(row.candidates):
        result = c.get("result") or {}
        failed = [t for t in result.get("tests") or [] if not t.get("passed")]
        candidates.append({"index": index, "code": c.get("code", ""), "reward": c.get("reward"),
                           "status": result.get("status"), "passed": result.get("status") == "passed",
                           "tests_passed": result.get("tests_passed"), "tests_total": result.get("tests_total"),
                           "failed": failed[:10], "stderr": (result.get("stderr") or "")[-4000:],
                           "detail": result.get("detail") or ""})
    return render(request, "evals/problem.html", {"e": evaluation, "row": row, "candidates": candidates})


@require_POST
def cancel(request: HttpRequest, pk: int) -> HttpResponse:
    evaluation = get_object_or_404(Evaluation.objects.visible_to(request.user), pk=pk)
    try:
        services.cancel_evaluation(evaluation)
    except services.EvalConflict as exc:
        messages.error(request, str(exc))
    return redirect("evals:detail", pk)


@require_POST
def before_after(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's one click: its base model and its best (else last) checkpoint, same suite and seed."""
    run = get_object_or_404(Run.objects.visible_to(request.user), pk=run_id)
    form = BenchmarkFields(request.POST, user=request.user)
    if not form.is_valid():
        messages.error(request, "Evaluate before/after: " + "; ".join(
            f"{field}: {' '.join(errors)}" for field, errors in form.errors.items()))
        return redirect(reverse("run-detail", args=[run.pk]))
    data = form.cleaned_data
    try:
        before, after = services.request_before_after(run, request.user, samples=data["samples"], ks=data["ks"],
                                                      seed=data["seed"], **form.target())
    except (ConfigError, services.EvalConflict) as exc:
        messages.error(request, f"Evaluate before/after: {exc}")
        return redirect(reverse("run-detail", args=[run.pk]))
    messages.success(request, f"Evaluations {before.pk} (base model) and {after.pk} (step {after.step}) queued.")
    return redirect(f"{reverse('evals:list')}?benchmark={before.benchmark}")
