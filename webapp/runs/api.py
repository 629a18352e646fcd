"""``/api/runs``, ``/api/presets`` and ``/api/engines`` (mounted by webapp/api.py). Shapes: docs/design.md
"Web (webapp/)" table."""
from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from sandbox.flags import FLAGS
from training.config import json_schema

from webapp.core.queueing import QueuePlaceOut
from webapp.problems.models import ProblemSet

from . import queries, services
from .archive import archive_extras
from .checkpoints import resolve_checkpoint_dir, stream_tar_gz
from .engines import engine_offers
from .model_refs import WEB_DEFAULT_MODEL
from .models import Checkpoint, Run
from .presets import presets
from .rescore import rescore_run

router = Router(tags=["runs"])
presets_router = Router(tags=["runs"])
engines_router = Router(tags=["runs"])


def _publish_config_schema(schema: dict[str, Any]) -> None:
    """``RunIn.config`` in /api/openapi.json: the training config's JSON Schema (this server's ceilings,
    the web's default model) less what the server sets itself. Validation stays with training.config,
    whose errors name the dotted field."""
    config = json_schema(settings.CONFIG_CEILINGS)
    for key in ("$schema", "$id"):  # a document's header, not a part's
        config.pop(key)
    del config["properties"]["problems"]  # from problem_set
    model = config["properties"]["model"]
    for where in (model["properties"], model["default"]):  # model.adapters: from name_or_path (run:<id>/step-<n>)
        del where["adapters"]
    model["properties"]["name_or_path"]["default"] = model["default"]["name_or_path"] = WEB_DEFAULT_MODEL
    config["description"] = "run config without `problems`, merged over the defaults (keys left out keep them)"
    schema.clear()
    schema.update(config)


class RunIn(Schema):
    name: str
    problem_set: int
    config: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_publish_config_schema)


class RunCreated(Schema):
    id: int
    status: str


class Error(Schema):
    detail: str
    field: str | None = None


class QueueDown(Schema):
    detail: str
    id: int
    status: str


class StatusOut(Schema):
    status: str


class RunItem(Schema):
    id: int
    name: str
    status: str
    step: int
    steps: int
    problem_set: int | None
    created: str | None
    finished: str | None


class QueueOut(QueuePlaceOut):
    """A queued run's place on the gpu queue: ``position`` (1 = the next run a gpu worker takes) and
    ``running`` (runs holding a gpu worker now, every user's) as before, and what it waits for."""


class RunOut(Schema):
    id: int
    name: str
    status: str
    error: str | None
    step: int
    steps: int
    problem_set: int | None
    latest: dict[str, Any]
    evals: list[dict[str, Any]]
    created: str | None
    started: str | None
    finished: str | None
    resume_count: int
    queue: QueueOut | None = None  # while queued


class MetricOut(Schema):
    step: int
    metrics: dict[str, Any]
    time: float | None = None


class ProblemOut(Schema):
    problem_id: str
    split: str
    solve_rate: float = Field(description="the share of its candidates that passed every test: train problems at "
                                          "their latest step, held-out ones (pass@1) at the latest evaluation")
    history: list[tuple[int, float]] = Field(description="[[step, solve_rate], ...] by step")
    zero_variance_groups: int
    solve_rate_turn1: float | None = Field(None, description="multi-turn runs: the latest solve rate counting "
                                                             "first turns only; null for a one-turn run")
    pass_rate: float = Field(description="solve_rate under its name before the rename")
    pass_rate_turn1: float | None = Field(None, description="solve_rate_turn1 under its name before the rename")


class MapProblemOut(Schema):
    problem_id: str
    history: list[tuple[int, float]] = Field(description="[[step, solve_rate], ...] at each step that sampled it")
    zero_variance_steps: list[int] = Field(description="steps where every candidate got one reward")
    set_aside_steps: list[int] = Field(description="steps whose group was left out of the update")
    final_solve_rate: float = Field(description="solve rate the last time it was sampled")
    final_pass_rate: float = Field(description="final_solve_rate under its name before the rename")
    first_solved_step: int | None = Field(description="first step where a candidate passed every test")
    zero_variance_groups: int
    status: Literal["became_solved", "never_solved", "solved_from_start"]


class MapSummaryOut(Schema):
    problems: int
    became_solved: int
    never_solved: int
    solved_from_start: int


class DifficultyMapOut(Schema):
    steps: list[int] = Field(description="every step that sampled a train problem, ascending")
    problems: list[MapProblemOut] = Field(description="train problems by id")
    summary: MapSummaryOut


class CandidateOut(Schema):
    phase: Literal["train", "eval"] = Field(description="train: sampled for RL step `step`; eval: a held-out "
                                                        "evaluation sample of the evaluation at `step` (0: before "
                                                        "training)")
    step: int
    index: int
    code: str
    reward: float | None
    rewards: dict[str, Any]
    passed: bool
    outcome: str
    truncated: bool = Field(description="generation hit max_new_tokens: the answer may be cut off")
    overlong_penalty: float | None = Field(description="reward.overlong soft: the length penalty included in "
                                                       "reward (in [-1, 0]); null when none applied")
    penalized_flags: list[str] = Field(description="the flags of reward.penalize_flags it carries (in any of "
                                                   "its executions): they set its total reward to 0")
    used: bool = Field(True, description="its group was part of the step's update")
    set_aside: str | None = Field(None, description="why its group was left out of the update: zero_variance "
                                                    "(every candidate got one reward) or surplus (dynamic sampling "
                                                    "already had problems_per_step informative groups)")
    result: dict[str, Any]
    turns: list[dict[str, Any]] = Field([], description="multi-turn repair (sampling.turns > 1): every turn, "
                                                        "{reply, code, feedback, result, reward, rewards, truncated, "
                                                        "flags}, the feedback being what the model was told after "
                                                        "that turn; the candidate's own fields are the last turn's; "
                                                        "empty for a one-turn candidate")


class CheckpointOut(Schema):
    id: int
    step: int
    kind: str
    path: str
    size_bytes: int
    download_url: str
    heldout_pass_at_1: float | None = Field(None, description="held-out pass@1 of the evaluation at this step")
    best: bool = Field(False, description="at the step with the highest held-out pass@1 (the latest on a tie)")


class RescoreIn(Schema):
    weights: dict[str, Any] = Field(default_factory=dict, description="reward.weights to try, merged over the "
                                    "run's own (dimensions left out keep theirs); validated as a run config's")
    steps: list[int] | None = Field(None, description="[from, to], clamped to the stored steps; "
                                                      "null = the last 10 steps with stored candidates")
    top: int = Field(10, description="how many problems to list, the most changed first (1-100)")


class RescoreStepOut(Schema):
    step: int
    sign_flips: float = Field(description="share of the step's candidates whose advantage changes sign "
                                          "(0, a group without signal, counts as a sign; reward.turns "
                                          "discounted: of the turns, each with its own advantage)")
    rank_corr: float = Field(description="mean over the step's groups of Spearman's rank correlation of "
                                         "the rewards before and after")
    candidates: int
    groups: int
    zero_variance_before: int = Field(description="groups whose candidates all got one reward, before")
    zero_variance_after: int


class RescoreTurnOut(Schema):
    reward_before: float = Field(description="the turn's own total reward")
    reward_after: float
    return_before: float = Field(description="what its tokens' advantage is computed from: with reward.turns "
                                             "discounted its return sum_{s>=t} gamma^(s-t) r_s, with final the "
                                             "trajectory's total")
    return_after: float
    advantage_before: float = Field(description="the advantage its tokens are trained with")
    advantage_after: float
    sign_flip: bool


class RescoreCandidateOut(Schema):
    step: int
    index: int
    reward_before: float = Field(description="the total its advantage is computed from (reward.turns "
                                             "discounted: its first turn's return)")
    reward_after: float
    advantage_before: float
    advantage_after: float
    sign_flip: bool = Field(description="an advantage of it changes sign (counted in sign_flips)")
    status: str = Field(description="execution outcome")
    rank_before: float = Field(description="its place in its group by reward_before (1 = best; ties share "
                                           "their mean rank)")
    rank_after: float = Field(description="its place in its group by reward_after")
    turns: list[RescoreTurnOut] | None = Field(None, description="multi-turn repair: each turn; absent for one "
                                                                 "turn")


class RescoreProblemOut(Schema):
    problem_id: str
    sign_flips: float
    rank_corr: float
    groups: int
    candidates: list[RescoreCandidateOut]


class RescoreSummaryOut(Schema):
    candidates: int
    groups: int
    sign_flips: float
    rank_corr: float


class RescoreOut(Schema):
    weights: dict[str, float] = Field(description="the weights re-scored with (after the merge)")
    weights_before: dict[str, float] = Field(description="the run's own weights")
    range: list[int] | None = Field(description="[from, to] re-scored; null while no candidate is stored")
    steps: list[RescoreStepOut]
    problems: list[RescoreProblemOut] = Field(description="the problems whose ranking changes most, first")
    summary: RescoreSummaryOut


class EngineOut(Schema):
    name: str
    available: bool
    reason: str | None = None


class PresetOut(Schema):
    name: str
    title: str
    description: str = ""
    config: dict[str, Any]


def _user(request: HttpRequest):
    return request.auth if hasattr(request.auth, "is_authenticated") else request.user


def _run(request: HttpRequest, run_id: int) -> Run:
    return get_object_or_404(Run.objects.visible_to(_user(request)), pk=run_id)


@router.post("", response={201: RunCreated, 400: Error, 503: QueueDown},
             summary="Create and launch a run (503: saved and queued, but the task queue is unreachable)")
def create_run(request: HttpRequest, payload: RunIn):
    user = _user(request)
    problem_set = ProblemSet.objects.visible_to(user).filter(pk=payload.problem_set).first()
    if problem_set is None:
        return Status(400, {"detail": f"problem_set: no problem set {payload.problem_set} of yours",
                            "field": "problem_set"})
    run = services.create_run(user, payload.name, problem_set, payload.config)
    if run.enqueued is False:
        return Status(503, {"detail": f"run {run.pk} is saved and queued, but the task queue (Redis) is "
                                      "unreachable; it starts by itself once Redis is back",
                            "id": run.pk, "status": run.status})
    return Status(201, {"id": run.pk, "status": run.status})


@router.get("", response=list[RunItem], summary="Your runs (staff: everyone's)")
def list_runs(request: HttpRequest):
    return [queries.run_list_item(r) for r in Run.objects.visible_to(_user(request)).order_by("-created")]


@router.get("/{int:run_id}", response=RunOut, summary="A run: status, progress, latest metrics, evals")
def get_run(request: HttpRequest, run_id: int):
    return queries.run_summary(_run(request, run_id))


@router.get("/{int:run_id}/metrics", response=list[MetricOut], summary="Metrics of every step, by step")
def get_metrics(request: HttpRequest, run_id: int):
    return queries.metrics(_run(request, run_id))


@router.get("/{int:run_id}/problems", response=list[ProblemOut], summary="Per-problem pass rates and history")
def get_problems(request: HttpRequest, run_id: int):
    return queries.problems(_run(request, run_id))


@router.get("/{int:run_id}/difficulty-map", response=DifficultyMapOut,
            summary="Each train problem's group pass rate per step, with first solved step and status")
def get_difficulty_map(request: HttpRequest, run_id: int):
    return queries.difficulty_map(_run(request, run_id))


@router.get("/{int:run_id}/problems/{path:problem_id}/candidates", response={200: list[CandidateOut], 400: Error},
            summary="Candidates of one problem (problem_id URL-encoded; may contain '/')")
def get_candidates(request: HttpRequest, run_id: int, problem_id: str,
                   status: Literal["failed", "passed"] | None = None, step: int | None = None,
                   flag: str | None = Query(None, description="only candidates whose result carries this "
                                                                "reward-hacking flag: " + ", ".join(FLAGS)),
                   phase: Literal["train", "eval"] | None = Query(
                       None, description="train: the candidates of RL steps; eval: the held-out evaluation's "
                                         "samples (with `step`: of the evaluation at that step)")):
    run = _run(request, run_id)
    if flag is not None and flag not in FLAGS:
        return Status(400, {"detail": f"flag: unknown flag {flag!r}; valid: {', '.join(FLAGS)}", "field": "flag"})
    return queries.candidates(run, problem_id, status=status, step=step, flag=flag, phase=phase)


@router.post("/{int:run_id}/cancel", response={200: StatusOut, 409: Error}, summary="Cooperative stop")
def cancel(request: HttpRequest, run_id: int):
    return Status(200, {"status": services.cancel_run(_run(request, run_id))})


@router.post("/{int:run_id}/resume", response={200: StatusOut, 409: Error},
             summary="Continue a failed or cancelled run from its last checkpoint")
def resume(request: HttpRequest, run_id: int):
    run = services.resume_run(_run(request, run_id))
    return Status(200, {"status": run.status})


@router.get("/{int:run_id}/checkpoints", response=list[CheckpointOut], summary="Checkpoints with download links")
def get_checkpoints(request: HttpRequest, run_id: int):
    return queries.checkpoints(_run(request, run_id))


@router.get("/{int:run_id}/checkpoints/{int:checkpoint_id}/download",
            summary="The checkpoint's Hugging Face directory as a streamed .tar.gz")
def download_checkpoint(request: HttpRequest, run_id: int, checkpoint_id: int):
    run = _run(request, run_id)
    checkpoint = get_object_or_404(Checkpoint, run=run, pk=checkpoint_id)
    try:
        directory = resolve_checkpoint_dir(run, checkpoint.path)
        chunks = stream_tar_gz(directory, archive_extras(run, checkpoint, directory))
        first = next(chunks)  # path and symlink checks happen before the response starts
    except FileNotFoundError as exc:
        raise HttpError(404, str(exc)) from None
    except PermissionError as exc:
        raise HttpError(403, str(exc)) from None

    def body():
        yield first
        yield from chunks

    filename = f"run-{run.pk}-{checkpoint.kind}-step-{checkpoint.step}.tar.gz"
    response = StreamingHttpResponse(body(), content_type="application/gzip")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@router.post("/{int:run_id}/rescore", response={200: RescoreOut, 400: Error},
             summary="What-if: the stored candidates' rewards and group advantages under other reward weights")
def rescore(request: HttpRequest, run_id: int, payload: RescoreIn):
    run = _run(request, run_id)
    return Status(200, rescore_run(run, payload.weights, payload.steps, payload.top))


@presets_router.get("", response=list[PresetOut], summary="Named run configs for the new-run form")
def list_presets(request: HttpRequest):
    return presets()


@engines_router.get("", response=list[EngineOut], summary="Generation engines (sampling.engine) a run here can use")
def list_engines(request: HttpRequest):
    return engine_offers()
