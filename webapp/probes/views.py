"""The set page's "Estimate difficulty" form posts here (the page itself is the problems app's)."""
from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from training.config import ConfigError

from webapp.core.refusals import add_refusal
from webapp.problems import services as problem_services
from webapp.problems.forms import ProblemFilterForm
from webapp.problems.views import PAGE_SIZE, filtered_problems, probe_context, visible_sets

from . import services
from .forms import ProbeForm


@require_POST
def request_probe(request: HttpRequest, pk: int) -> HttpResponse:
    problem_set = get_object_or_404(visible_sets(request), pk=pk)
    form = ProbeForm(request.POST, user=request.user)
    if form.is_valid():
        try:
            services.request_probe(problem_set, request.user, form.cleaned_data["model"], None,
                                   form.cleaned_data["samples"])
        except (ConfigError, services.ProbeConflict) as exc:
            add_refusal(form, exc)
        else:
            messages.success(request, "Difficulty probe queued; the card below says where it stands.")
            return redirect(f"{reverse('problems:detail', args=[pk])}#probe")
    _, problems = filtered_problems(problem_set, {})
    page = Paginator(problems, PAGE_SIZE).get_page(1)
    return render(request, "problems/detail.html", {
        "ps": problem_set, "form": ProblemFilterForm(), "page": page, "query": "",
        "in_use": problem_services.active_runs(problem_set), **probe_context(request, problem_set, page),
        "probe_form": form,
    }, status=400)
