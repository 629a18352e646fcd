"""The home page: the user's latest runs and problem sets (above both apps, as urls.py is)."""
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.problems.models import ProblemSet
from webapp.runs.models import Run


@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "core/dashboard.html", {
        "runs": Run.objects.visible_to(request.user).order_by("-created")[:10],
        "problem_sets": ProblemSet.objects.visible_to(request.user).order_by("-created")[:10],
    })
