"""Run pages: list, new (form + presets), detail (live), candidates fragment, compare, cancel/resume."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import fields
from pathlib import Path

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from sandbox.flags import FLAGS
from training import metrics as metric_registry
from training.config import ConfigError, RewardWeights

from webapp.core.highlight import highlight_python
from webapp.core.params import int_param
from webapp.core.refusals import add_refusal
from webapp.core.text import name_problem, text_problem
from webapp.problems.models import ProblemSet

from . import integrity, queries, rescore, runtime, services
from .archive import config_yaml
from .candidate_groups import group_failures, member_of
from .config import default_config, merge_config
from .forms import RunForm, flatten, set_warnings, sets_issues
from .models import Candidate, ProblemStat, Run, RunEvent, StepMetric, TransitionError, status_groups
from .presets import get_preset, presets
from .trajectory import turn_views


# As django.utils.html.json_script: the JSON can never close the <script> element it sits in.
_JSON_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


def _run(request: HttpRequest, run_id: int) -> Run:
    return get_object_or_404(Run.objects.visible_to(request.user).select_related("problem_set", "owner"), pk=run_id)


@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.visible_to(request.user).select_related("problem_set", "owner").order_by("-created")
    return render(request, "runs/list.html", {"rows": queries.experiment_rows(runs), "run_statuses": status_groups()})


@require_POST
def run_edit(request: HttpRequest, run_id: int) -> HttpResponse:
    """Rename a run and keep notes or tags on it."""
    run = _run(request, run_id)
    name = request.POST.get("name", "").strip()
    notes = request.POST.get("notes", "").strip()
    problem = _edit_problem(name, notes)
    if problem:
        messages.error(request, problem)
    else:
        run.edit(name=name, notes=notes)
    return redirect("run-detail", run_id=run.pk)


def _edit_problem(name: str, notes: str) -> str | None:
    if (problem := name_problem(name)) is not None:
        return f"The run's name {problem}."
    if len(notes) > 5000:
        return f"Notes hold at most 5,000 characters; these have {len(notes)}."
    if (problem := text_problem(notes)) is not None:
        return f"The notes: {problem}."
    return None


@require_http_methods(["GET", "POST"])
def run_new(request: HttpRequest) -> HttpResponse:
    # The preset the user last picked (run_new.js keeps it in the form) frames "changed from the preset".
    preset = get_preset(request.POST.get("preset") or request.GET.get("preset", "cpu-demo")) or presets()[0]
    initial_config = merge_config(default_config(), preset["config"])
    # ?clone=<id>: the form starts from that run's config and set; the launch bar lists changes from it.
    clone = int_param(request.GET.get("clone"))
    clone = Run.objects.visible_to(request.user).filter(pk=clone).first() if clone is not None else None
    if clone is not None:
        initial_config = merge_config(default_config(), {k: v for k, v in clone.config.items() if k != "problems"})
        preset = {"name": f"run-{clone.pk}", "title": f"run #{clone.pk} {clone.name}", "config": initial_config}
    warnings: list[str] = []
    if request.method == "POST":
        form = RunForm(request.POST, user=request.user, initial_config=initial_config)
        if form.is_valid():
            warnings = form.launch_warnings()
        # Confirming covers the warnings the user saw: a change that brings different ones asks again.
        if form.is_valid() and (not warnings or request.POST.get("confirm_warnings") == _digest(warnings)):
            overrides = {k: v for k, v in form.config.items() if k != "problems"}
            try:
                run = services.create_run(request.user, form.cleaned_data["name"], form.cleaned_data["problem_set"],
                                          overrides)
            except ConfigError as exc:
                add_refusal(form, exc)
            else:
                if run.enqueued is False:
                    messages.warning(request, f"Run {run.name} is queued, but the task queue (Redis) is "
                                              "unreachable; it starts by itself once Redis is back.")
                return redirect("run-detail", run_id=run.pk)
    else:
        initial = {"name": f"{clone.name} (clone)" if clone else f"{preset['name']} run"}
        # ?reward.weights.<dimension>=W (the run page's what-if "Start a run with these weights"): the
        # form starts with those weights, and the launch bar lists them as changes from the clone.
        weights = _weight_params(request)
        initial.update(weights)
        if weights and clone:
            initial["name"] = f"{clone.name} (re-weighted)"
        problem_set = int_param(request.GET.get("problem_set")) or (clone.problem_set_id if clone else None)
        if problem_set is not None:
            initial["problem_set"] = problem_set
        form = RunForm(user=request.user, initial=initial, initial_config=initial_config)
        if "problem_set" not in initial:
            default = _default_problem_set(form.fields["problem_set"].queryset,
                                           initial_config["sampling"]["problems_per_step"])
            if default is not None:
                form.initial["problem_set"] = default.pk
    flat_presets = [{"name": p["name"], "title": p["title"], "description": p.get("description", ""),
                     "values": flatten(merge_config(default_config(), p["config"]))}
                    for p in presets() + ([preset] if clone else [])]
    # What each set lacks (forms.set_warnings), for the launch bar to say before Launch is pressed (the
    # server asks again): at the form's problems_per_step and at each preset's, so that a preset click
    # answers at once; any other value the page asks of GET /runs/new/set-issues.
    sets = list(form.fields["problem_set"].queryset)
    steps = {int_param(str(form["sampling.problems_per_step"].value()))}
    steps |= {p["values"].get("sampling.problems_per_step") for p in flat_presets}
    set_facts = {"names": {ps.pk: ps.name for ps in sets},
                 "issues": {"" if n is None else str(n): sets_issues(sets, n)
                            for n in steps if n is None or isinstance(n, int)}}
    return render(request, "runs/new.html", {"form": form, "presets": flat_presets, "preset": preset,
                                             "launch_warnings": warnings, "warnings_digest": _digest(warnings),
                                             "set_facts": set_facts})


@require_GET
def run_new_set_issues(request: HttpRequest) -> JsonResponse:
    """JSON for the new-run form: ``{problems_per_step, sets: {id: [short warnings]}}`` for the user's sets
    at ``?problems_per_step=N`` (``forms.set_warnings``, as the form's submit asks it)."""
    per_step = int_param(request.GET.get("problems_per_step") or "")
    if per_step is not None and per_step < 1:
        per_step = None
    sets = ProblemSet.objects.visible_to(request.user)
    return JsonResponse({"problems_per_step": per_step, "sets": sets_issues(sets, per_step)})


def _weight_params(request: HttpRequest) -> dict[str, float]:
    """``reward.weights.<dimension>`` query parameters that are weights (finite, >= 0); the others are
    left out with a message naming them."""
    out = {}
    for f in fields(RewardWeights):
        key = f"reward.weights.{f.name}"
        if key not in request.GET:
            continue
        try:
            value = float(request.GET[key])
        except ValueError:
            value = -1.0
        if math.isfinite(value) and value >= 0:
            out[key] = value
        else:
            messages.warning(request, f"{key}: {request.GET[key][:50]!r} is not a weight (a number >= 0); "
                                      "the form keeps the run's own")
    return out


def _digest(warnings: list[str]) -> str:
    return hashlib.sha256("\n".join(warnings).encode()).hexdigest()[:16]


def _default_problem_set(sets, problems_per_step: int):
    """The newest set a run can train and evaluate on as configured; the newest set when none is clean.

    The newest upload is often a small scratch file without a held-out split; preselecting it made
    runs that could never report held-out pass@1.
    """
    sets = list(sets[:50])
    return next((ps for ps in sets if ps.train_count and not set_warnings(ps, problems_per_step)),
                next((ps for ps in sets if ps.train_count and ps.heldout_count), sets[0] if sets else None))


@require_GET
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    # Only reads: a run whose worker died gets its verdict from the lost-run sweep (celery beat every
    # minute, and each worker start: tasks.fail_lost_runs), never from whoever opens the page.
    run = _run(request, run_id)
    run_evals = queries.evals(run)
    run_warnings = queries.run_warnings(run)  # divergence warnings (training/divergence.py)
    last_seq = RunEvent.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first()
    latest = StepMetric.objects.filter(run=run).order_by("-step").values_list("step", "metrics").first()
    state = json.dumps({
        "run": queries.run_list_item(run) | {"error": run.error or None, "started": queries.iso(run.started),
                                             "queue": queries.queue(run)},
        "evals": run_evals, "checkpoints": queries.checkpoints(run), "health": queries.sandbox_health(run),
        "outcomes": queries.outcome_rows(), "last_seq": -1 if last_seq is None else last_seq,
        "mismatch_kl_threshold": runtime.MISMATCH_KL_WARN, "config_facts": _config_facts(run.config),
        "mismatch_warning": latest and runtime.mismatch_warning(latest[1], latest[0],
                                                                tis_cap=runtime.tis_cap_of(run.config)),
    })
    # The two big arrays are spliced in as stored (see queries.metrics_json).
    state = state[:-1] + f',"metrics":{queries.metrics_json(run)},"problems":{queries.problems_json(run)}}}'
    state = mark_safe(state.translate(_JSON_SCRIPT_ESCAPES))
    return render(request, "runs/detail.html", {
        "run": run, "state": state, "headline": queries.headline(run_evals),
        "config_summary": _config_summary(run.config), "config_yaml": config_yaml(run),
        "runtime": runtime.runtime_rows(runtime.latest_start(run)), "run_id": run.pk,
        "integrity": integrity.panel(run),
        "run_warnings": run_warnings,
        "whatif": rescore.panel_context(run), "turns": _turns_of(run.config),
        # the registry of step metrics names the charts and their lines; repair only on multi-turn runs
        "metric_registry": metric_registry.registry_json(), "run_statuses": status_groups(),
        "charts": [c.name for c in metric_registry.CHARTS if c.name != "repair" or _turns_of(run.config) > 1],
        # "Compare with…": the newest runs this user sees, those on the same problem set first.
        "compare_candidates": sorted(
            Run.objects.visible_to(request.user).exclude(pk=run.pk).only("id", "name", "status", "problem_set_id")[:30],
            key=lambda r: r.problem_set_id != run.problem_set_id),
    })


def _turns_of(config: dict) -> int:
    """``sampling.turns`` of a stored config (runs stored before it existed had one turn)."""
    turns = ((config or {}).get("sampling") or {}).get("turns", 1)
    return turns if isinstance(turns, int) and not isinstance(turns, bool) else 1


@require_GET
def run_config_yaml(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's config as a file that ``python -m training run --config`` takes."""
    run = _run(request, run_id)
    response = HttpResponse(config_yaml(run), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.yaml"'
    return response


@require_GET
def run_runtime(request: HttpRequest, run_id: int) -> HttpResponse:
    """HTML fragment: the runtime panel (the page fetches it when a live ``start`` event arrives)."""
    run = _run(request, run_id)
    return render(request, "runs/_runtime.html", {"runtime": runtime.runtime_rows(runtime.latest_start(run)),
                                                  "run_id": run.pk})


ENGINE_LOG_BYTES = 64 * 1024


@require_GET
def run_engine_log(request: HttpRequest, run_id: int) -> HttpResponse:
    """The newest 64 KiB of the run's vLLM server log (``RUN_DIR/engine/vllm.log``) as plain text."""
    run = _run(request, run_id)
    path = Path(run.path) / "engine" / "vllm.log"
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - ENGINE_LOG_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        raise Http404("this run has no engine log (its engine is hf, or its server has not started)")
    if size > ENGINE_LOG_BYTES:
        text = f"[... {size - ENGINE_LOG_BYTES} earlier bytes left out]\n" + text.split("\n", 1)[-1]
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@require_GET
def run_integrity(request: HttpRequest, run_id: int) -> HttpResponse:
    """HTML fragment: the reward-integrity panel's tables (the page fetches it as flagged steps arrive)."""
    run = _run(request, run_id)
    return render(request, "runs/_integrity_tables.html", {"run": run, "integrity": integrity.panel(run)})


def _config_facts(config: dict) -> dict:
    """What the run page needs to know which panels are 0 by construction (clip fraction, KL), and the
    groups a step samples without dynamic sampling (the groups chart's reference line)."""
    if not config:
        return {}
    ppo, sampling = config.get("ppo", {}), config.get("sampling", {})
    batch = sampling.get("problems_per_step", 0) * sampling.get("candidates_per_problem", 0)
    minibatch = ppo.get("minibatch_size")
    return {"epochs_per_batch": ppo.get("epochs_per_batch"), "kl_coef": ppo.get("kl_coef"),
            "single_minibatch": minibatch is None or minibatch >= batch,
            "problems_per_step": sampling.get("problems_per_step"), "dynamic": bool(sampling.get("dynamic"))}


def _reward_note(dimension: str, value, candidate: dict) -> str:
    """Why a dimension reads as it does where the number alone looks like a bug."""
    if dimension == "efficiency" and not value and not candidate.get("passed"):
        # training.rewards.efficiency: otherwise fast wrong answers would be rewarded
        return "0 by design: only a candidate that passes every test earns efficiency"
    return ""


def _shown(value) -> str:
    """A config value as the YAML config spells it (null, true, [..]), never Python's None/True."""
    return value if isinstance(value, str) else json.dumps(value)


def _config_summary(config: dict) -> list[tuple[str, str]]:
    if not config:
        return []
    lora = config["model"].get("lora")
    s, p, t = config["sampling"], config["ppo"], config["train"]
    # .get: runs stored before sampling.thinking, reward.overlong and ppo.tis_cap existed lack them.
    overlong = config["reward"].get("overlong") or {}
    rows = [
        ("model", f"{config['model']['name_or_path']} ({config['model']['dtype']})"),
        ("training", f"LoRA r {lora['r']}, alpha {lora['alpha']}" if lora else "full fine-tune"),
        ("batch", f"{s['problems_per_step']} problems × {s['candidates_per_problem']} candidates, "
                  f"≤ {s['max_new_tokens']} new tokens, T {s['temperature']}"
                  + (", thinking on" if s.get("thinking") else "")
                  + (f", dynamic sampling (≤ {s.get('max_rounds', 3)} rounds)" if s.get("dynamic") else "")),
        ("PPO", f"{p['advantage']}, lr {p['learning_rate']:g}, KL {p['kl_coef']:g} ({p['kl_estimator']}), "
                f"clip {p['clip_range']:g}" + (f", TIS cap {p['tis_cap']:g}" if p.get("tis_cap") is not None else "")),
        ("reward weights", ", ".join(f"{k} {v:g}" for k, v in config["reward"]["weights"].items())),
    ]
    if _turns_of(config) > 1:
        reward = config["reward"]
        credit = ("the last turn's reward for every token" if reward.get("turns", "final") == "final" else
                  f"discounted per turn (γ {reward.get('turn_discount', 0.4):g})")
        fb = config.get("feedback") or {}
        rows.append(("repair turns", f"up to {_turns_of(config)} turns; credit: {credit}; feedback: "
                                     f"{fb.get('tests_shown', 3)} failing tests, {fb.get('stderr_chars', 2000)} "
                                     f"characters of stderr"))
    if overlong.get("mode", "none") != "none":
        rows.append(("truncated replies", "left out of the loss" if overlong["mode"] == "mask" else
                     f"soft penalty over the last {overlong.get('buffer_tokens')} tokens"))
    rows.append(("schedule", f"{t['steps']} steps, eval every {t['eval_every']}, "
                             f"checkpoint every {t['checkpoint_every']}"))
    return rows


SET_ASIDE_TEXT = {
    "zero_variance": "zero variance: every candidate of its group got one reward, so it carried no learning signal",
    "surplus": "surplus: dynamic sampling already had problems_per_step informative groups this step",
}
"""Why a candidate's group was left out of the update (the problem event's ``set_aside``)."""


CANDIDATES_PAGE = 50
"""Candidates per page of the run page's inspector (newest first; ?page=2 the next 50, and so on)."""


@require_GET
def run_candidates(request: HttpRequest, run_id: int, problem_id: str) -> HttpResponse:
    """HTML fragment: a problem's candidates, code highlighted server-side; ``flag`` keeps those whose
    result carries it (as the API's), the filter offering the flags the listed candidates carry. A
    held-out problem's candidates are its evaluation samples, with links to the evaluation before
    training and the latest one (``step``)."""
    run = _run(request, run_id)
    status = request.GET.get("status") or None
    if status not in (None, "failed", "passed"):
        raise Http404("status must be failed or passed")
    flag = request.GET.get("flag") or None
    if flag is not None and flag not in FLAGS:
        raise Http404(f"flag must be one of {', '.join(FLAGS)}")
    phase = request.GET.get("phase") or None
    if phase not in (None, "train", "eval"):
        raise Http404("phase must be train or eval")
    step = int_param(request.GET.get("step"))
    listed = queries.candidates(run, problem_id, status=status, step=step, phase=phase)
    flag_counts = integrity.flag_counts(listed)
    candidates = [c for c in listed if flag in integrity.carried_flags(c)] if flag else listed
    pages = max(1, -(-len(candidates) // CANDIDATES_PAGE))
    raw_page = request.GET.get("page")
    page = int_param(raw_page) if raw_page else 1
    if page is None or not 1 <= page <= pages:
        raise Http404(f"page must be a whole number from 1 to {pages}")
    first = (page - 1) * CANDIDATES_PAGE
    shown = candidates[first:first + CANDIDATES_PAGE]
    groups = group_failures(candidates)
    for c in shown:
        c["code_group"], c["error_group"] = member_of(groups, c)
        c["code_html"] = highlight_python(c["code"])
        c["rewards_list"] = [(k, v, _reward_note(k, v, c)) for k, v in sorted(c["rewards"].items())]
        c["badges"] = integrity.badges(integrity.carried_flags(c), c["penalized_flags"])
        c["set_aside_text"] = SET_ASIDE_TEXT.get(c["set_aside"], c["set_aside"] or "")
        c["set_aside_label"] = (c["set_aside"] or "").replace("_", " ")
        c["turn_views"] = turn_views(c["turns"])
    heldout = ProblemStat.objects.filter(run=run, problem_id=problem_id, split="heldout").first()
    evaluations = [(s, round(100 * rate)) for s, rate in heldout.history] if heldout else []
    flag_filters = [{"name": name, "meaning": FLAGS[name], "count": flag_counts.get(name, 0)}
                    for name in FLAGS if name in flag_counts or name == flag]
    return render(request, "runs/_candidates.html", {
        "run": run, "problem_id": problem_id, "candidates": shown, "total": len(candidates),
        "page": page, "pages": pages, "first": first + 1, "last": first + len(shown),
        "newer": min(CANDIDATES_PAGE, first), "older": min(CANDIDATES_PAGE, len(candidates) - first - len(shown)),
        "status": status or "all", "flag": flag or "", "flag_filters": flag_filters, "step": step,
        "heldout": heldout is not None, "evaluations": evaluations,
        # Groups only say something when some failures repeat (a code or a first error twice or more).
        "groups": groups if any(g["count"] > 1 for g in groups["by_code"] + groups["by_error"]) else None,
        "eval_filters": _eval_filters(run, evaluations, step) if heldout else [],
        # Runs trained before evaluation samples were recorded have a held-out problem's pass@1 only.
        "samples_recorded": heldout is not None and Candidate.objects.filter(
            run=run, problem_id=problem_id, phase=Candidate.Phase.EVAL).exists(),
    })


def _eval_filters(run: Run, evaluations: list[tuple[int, int]], step: int | None) -> list[dict]:
    """The held-out pane's choice of samples: every evaluation's, the first (before training) and the
    latest (after training, once the run is over)."""
    if not evaluations:
        return []
    first, last = evaluations[0][0], evaluations[-1][0]
    out = [{"step": "", "label": "every evaluation", "active": step is None},
           {"step": first, "label": f"before training (step {first})" if first == 0 else f"first (step {first})",
            "active": step == first}]
    if last != first:
        out.append({"step": last, "label": f"{'after training' if run.is_finished else 'latest'} (step {last})",
                    "active": step == last})
    return out


def _transition(request: HttpRequest, run_id: int, change) -> HttpResponse:
    """A run page button: `change(run)`, then back to the run page (a refused transition as a message)."""
    run = _run(request, run_id)
    try:
        change(run)
    except TransitionError as exc:
        messages.error(request, str(exc))
    return redirect("run-detail", run_id=run.pk)


@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    return _transition(request, run_id, services.cancel_run)


@require_POST
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    return _transition(request, run_id, services.resume_run)


@require_GET
def run_compare(request: HttpRequest) -> HttpResponse:
    # ids=1,2 (the runs list) or ids=1&ids=2 (the run page's "Compare with…" form), or both.
    raw = [x for value in request.GET.getlist("ids") for x in value.split(",") if x.strip()]
    ids = [int_param(x) for x in raw]
    if None in ids:
        given = ",".join(request.GET.getlist("ids"))
        messages.error(request, f"ids must be run numbers separated by commas, got {given[:100]!r}")
        return redirect("run-list")
    ids = list(dict.fromkeys(ids))
    runs = {r.pk: r for r in Run.objects.visible_to(request.user).select_related("problem_set").filter(pk__in=ids)}
    missing = [i for i in ids if i not in runs]
    if missing:
        raise Http404(f"no run {missing[0]}")
    if len(ids) < 2:
        messages.error(request, "Tick at least two runs in the list to compare them.")
        return redirect("run-list")
    ordered = [runs[i] for i in ids]
    # config["problems"] is each run's own copy of the problems file, so it always differs: show the set.
    flats = [{k: v for k, v in flatten(r.config).items() if k != "problems"}
             | {"problem set": r.problem_set.name if r.problem_set else "(deleted)"} for r in ordered]
    keys = sorted(set().union(*flats)) if flats else []
    diff = [(k, [f.get(k) for f in flats]) for k in keys]
    differing = [(k, [_shown(v) for v in values]) for k, values in diff if len({repr(v) for v in values}) > 1]
    series = [{"id": r.pk, "name": r.name, "metrics": queries.metrics(r), "evals": queries.evals(r)} for r in ordered]
    # The runs list's numbers (held-out before/after/best, final reward, duration), with what each sampled.
    rows = {row["run"].pk: row for row in queries.experiment_rows(Run.objects.filter(pk__in=ids))}
    summary = [rows[r.pk] | {"engine": ((r.config or {}).get("sampling") or {}).get("engine", "hf"),
                             "model": ((r.config or {}).get("model") or {}).get("name_or_path", "")} for r in ordered]
    return render(request, "runs/compare.html", {"runs": ordered, "differing": differing, "summary": summary,
                                                 "same": len(diff) - len(differing), "series": series,
                                                 "metric_registry": metric_registry.registry_json()})
