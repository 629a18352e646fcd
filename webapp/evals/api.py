"""`/api/evals` (docs/design.md "Benchmark evaluation"): benchmark evaluations with pass@k, each a `gpu`
job; a user sees and evaluates only their own models, checkpoints and problem sets (staff: all)."""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema
from ninja.responses import Status

from training.config import ConfigError
from training.suites import suites_info

from webapp.problems.models import ProblemSet
from webapp.runs.models import Run

from . import services
from .models import EvalProblem, Evaluation

router = Router(tags=["evaluations"])


class Error(Schema):
    detail: str
    field: str | None = None


class SuiteOut(Schema):
    name: str
    title: str
    package: str
    available: bool


class EvalIn(Schema):
    model: str = Field(description="a preset or installed model (models/<name>), a hub id (org/name), or a "
                                   "checkpoint of one of your runs as run:<id>/step-<n>")
    suite: str | None = Field(None, description="a benchmark suite: humaneval, or humaneval:N for its first N "
                                                "problems (GET /api/evals/suites); or give problem_set")
    problem_set: int | None = Field(None, description="one of your problem sets as the benchmark (instead of suite)")
    split: str = Field("all", description="the problem set's problems to evaluate: all, heldout or train")
    samples: int = Field(services.DEFAULT_SAMPLES, description="n: samples per problem (1 to the server's "
                                                               "CRUCIBLE_PROBE_MAX_SAMPLES)")
    ks: list[int] | None = Field(None, description="the k of pass@k, each <= samples (default 1, 2, 4, ..., samples)")
    seed: int = Field(0, description="sampling seed (the same seed and settings sample the same candidates)")


class BeforeAfterIn(Schema):
    run: int = Field(description="one of your runs with a checkpoint")
    suite: str | None = "humaneval"
    problem_set: int | None = None
    split: str = "all"
    samples: int = services.DEFAULT_SAMPLES
    ks: list[int] | None = None
    seed: int = 0


class EvalOut(Schema):
    id: int
    status: str
    suite: str | None
    problem_set: int | None
    benchmark: str
    model: str
    run: int | None
    step: int | None
    label: str | None
    samples: int
    ks: list[int]
    seed: int
    done: int
    total: int
    pass_at_1: float | None = Field(None, alias="pass@1")
    pass_at_k: dict[str, float] = Field(default_factory=dict, alias="pass@k")
    mean_test_pass_rate: float | None
    error: str
    in_progress: bool
    progress_text: str
    created: str
    finished: str | None


class ProblemRow(Schema):
    problem_id: str
    n: int
    c: int
    pass_at_1: float = Field(alias="pass@1")
    pass_at_k: dict[str, float] = Field(alias="pass@k")


class EvalDetail(EvalOut):
    problems: list[ProblemRow]


class BeforeAfterOut(Schema):
    before: EvalOut
    after: EvalOut


def _user(request: HttpRequest):
    return request.auth if hasattr(request.auth, "is_authenticated") else request.user


def _evaluation(request: HttpRequest, evaluation_id: int) -> Evaluation:
    return get_object_or_404(Evaluation.objects.visible_to(_user(request)), pk=evaluation_id)


def _problem_set(user, pk: int | None) -> ProblemSet | None:
    if pk is None:
        return None
    found = ProblemSet.objects.visible_to(user).filter(pk=pk).first()
    if found is None:
        raise ConfigError("problem_set", f"no problem set {pk} of yours")
    return found


@router.get("/suites", response=list[SuiteOut], summary="The benchmark suites this server has offline")
def list_suites(request: HttpRequest):
    return suites_info()


@router.post("", response={202: EvalOut, 400: Error, 409: Error}, by_alias=True,
             summary="Evaluate a model or checkpoint on a benchmark (a job on the gpu queue)")
def create(request: HttpRequest, payload: EvalIn):
    user = _user(request)
    evaluation = services.request_evaluation(
        user, model=payload.model, suite=payload.suite, problem_set=_problem_set(user, payload.problem_set),
        split=payload.split, samples=payload.samples, ks=payload.ks, seed=payload.seed)
    return Status(202, evaluation.state())


@router.post("/before-after", response={202: BeforeAfterOut, 400: Error, 404: Error, 409: Error}, by_alias=True,
             summary="A run's base model and its best (else last) checkpoint on the same benchmark and seed")
def before_after(request: HttpRequest, payload: BeforeAfterIn):
    user = _user(request)
    run = get_object_or_404(Run.objects.visible_to(user), pk=payload.run)
    before, after = services.request_before_after(
        run, user, suite=None if payload.problem_set is not None else payload.suite,
        problem_set=_problem_set(user, payload.problem_set), split=payload.split, samples=payload.samples,
        ks=payload.ks, seed=payload.seed)
    return Status(202, {"before": before.state(), "after": after.state()})


@router.get("", response=list[EvalOut], by_alias=True, summary="Your evaluations, newest first")
def list_evaluations(request: HttpRequest, benchmark: str | None = None, run: int | None = None):
    found = Evaluation.objects.visible_to(_user(request))
    if run is not None:
        found = found.filter(run_id=run)
    rows = [e.state() for e in found[:500]]
    return [r for r in rows if benchmark is None or r["benchmark"] == benchmark]


@router.get("/{int:evaluation_id}", response=EvalDetail, by_alias=True, summary="An evaluation with its per-problem pass counts")
def get_evaluation(request: HttpRequest, evaluation_id: int):
    evaluation = _evaluation(request, evaluation_id)
    return {**evaluation.state(), "problems": [p.row() for p in evaluation.problems.all()]}


@router.get("/{int:evaluation_id}/problems/{path:problem_id}/candidates", response=list[dict[str, Any]],
            summary="One problem's samples: code, reward, and execution result (problem_id URL-encoded)")
def get_candidates(request: HttpRequest, evaluation_id: int, problem_id: str):
    evaluation = _evaluation(request, evaluation_id)
    row = get_object_or_404(EvalProblem, evaluation=evaluation, problem_id=problem_id)
    return [{"index": i, **c} for i, c in enumerate(row.candidates)]


@router.post("/{int:evaluation_id}/cancel", response={200: EvalOut, 409: Error}, by_alias=True, summary="Stop an evaluation")
def cancel(request: HttpRequest, evaluation_id: int):
    return Status(200, services.cancel_evaluation(_evaluation(request, evaluation_id)).state())
