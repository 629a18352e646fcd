"""Read side of runs: the JSON shapes of the API table in docs/design.md "Web (webapp/)", shared by the API
and the pages."""
from __future__ import annotations

import json

from django.db import connection
from django.db.models import Count, Q

from sandbox.result import Outcome

from webapp.core import queueing

from .archive import best_checkpoint_ids, heldout_points
from .models import SUPERVISED_STATUSES, Candidate, Checkpoint, Eval, ProblemStat, Run, RunEvent, StepMetric

# Outcomes of an execution are the sandbox's enum, with its labels and which are the sandbox's (or the
# machine's) fault rather than the candidate's.
OUTCOME_LABELS = {o.value: o.label for o in Outcome}
INFRASTRUCTURE = tuple(o.value for o in Outcome if o.infrastructure)
HEALTH_COLOURS = {Outcome.PASSED: "#15803d", Outcome.FAILED: "#f97316", Outcome.ERROR: "#b91c1c",
                  Outcome.SYNTAX_ERROR: "#7f1d1d", Outcome.TIMEOUT: "#b45309", Outcome.MEMORY: "#6d28d9",
                  Outcome.OUTPUT_LIMIT: "#a21caf", Outcome.KILLED: "#111827"}


def outcome_rows() -> list[dict]:
    """The sandbox-health panel's legend, in the enum's order (the run page draws it as given):
    ``[{status, label, colour, infrastructure}]``."""
    return [{"status": o.value, "label": o.label + (" (infra)" if o.infrastructure else ""),
             "colour": HEALTH_COLOURS.get(o, "#6b7280"), "infrastructure": o.infrastructure} for o in Outcome]


def iso(dt) -> str | None:
    return dt.isoformat() if dt else None


def run_summary(run: Run) -> dict:
    latest = run.step_metrics.order_by("-step").first()
    return {
        "id": run.pk, "name": run.name, "status": run.status, "error": run.error or None,
        "step": run.step, "steps": run.steps,
        "problem_set": run.problem_set_id,
        "latest": {"step": latest.step if latest else None, "metrics": latest.metrics if latest else {}},
        "evals": evals(run),
        "created": iso(run.created), "started": iso(run.started), "finished": iso(run.finished),
        "resume_count": run.resume_count,
        "queue": queue(run),
    }


def queue(run: Run) -> dict | None:
    """Where a queued run stands on the gpu queue: ``{position (1 = next), running, ..., text}``
    (``webapp.core.queueing.place``); None once it left.

    Counts every user's runs (the queue is shared) but names only the owner's own.
    """
    return queueing.place(run)


def experiment_rows(runs) -> list[dict]:
    """The runs list as an experiment table: held-out pass@1 before / after / best, the last step's
    total reward and the duration, for every run in two queries."""
    from django.db.models import Exists, JSONField, OuterRef, Subquery
    from django.utils import timezone

    latest = StepMetric.objects.filter(run=OuterRef("pk")).order_by("-step").values("metrics")[:1]
    warned = RunEvent.objects.filter(run=OuterRef("pk"), **DIVERGENCE_WARNINGS)  # (run_warnings)
    runs = list(runs.annotate(latest_metrics=Subquery(latest, output_field=JSONField()), has_warnings=Exists(warned)))
    by_run: dict[int, list[tuple[int, float]]] = {}
    for run_id, step, p1 in (Eval.objects.filter(run__in=[r.pk for r in runs], split="heldout", pass_at_1__isnull=False)
                             .order_by("step").values_list("run_id", "step", "pass_at_1")):
        by_run.setdefault(run_id, []).append((step, p1))
    now = timezone.now()
    rows = []
    for run in runs:
        points = by_run.get(run.pk, [])
        reward = (run.latest_metrics or {}).get("reward/mean")
        end = run.finished or (now if run.status in SUPERVISED_STATUSES else None)
        rows.append({"run": run, "before": points[0][1] if points else None,
                     "after": points[-1][1] if len(points) > 1 else None,
                     "best": max(p for _, p in points) if points else None,
                     "best_step": max(points, key=lambda point: point[1])[0] if points else None,
                     "warned": run.has_warnings,
                     "reward": reward if isinstance(reward, (int, float)) else None,
                     "duration_s": (end - run.started).total_seconds() if run.started and end else None})
        rows[-1]["duration"] = duration_text(rows[-1]["duration_s"])
    return rows


def duration_text(seconds: float | None) -> str:
    """As the run page's ETA writes durations: 42 s, 3 min 5 s, 1.5 h."""
    if seconds is None:
        return ""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {round(seconds % 60)} s"
    return f"{round(seconds)} s"


def run_list_item(run: Run) -> dict:
    return {"id": run.pk, "name": run.name, "status": run.status, "step": run.step, "steps": run.steps,
            "problem_set": run.problem_set_id, "created": iso(run.created), "finished": iso(run.finished)}


def evals(run: Run) -> list[dict]:
    return [{"step": e.step, "split": e.split, "pass@1": e.pass_at_1, "pass@k": e.pass_at_k}
            | ({"pass@1/turn1": e.pass_at_1_turn1} if e.pass_at_1_turn1 is not None else {})
            for e in Eval.objects.filter(run=run).order_by("step", "id")]


def metrics(run: Run) -> list[dict]:
    rows = StepMetric.objects.filter(run=run).order_by("step").values_list("step", "metrics", "time")
    return [{"step": step, "metrics": m, "time": t} for step, m, t in rows]


PROBLEM_ROW = ("problem_id", "split", "solve_rate", "history", "zero_variance_groups", "solve_rate_turn1")
"""A row of the run page's per-problem table (and of ``GET /api/runs/{id}/problems``), as stored."""
OLD_NAMES = {"pass_rate": "solve_rate", "pass_rate_turn1": "solve_rate_turn1"}
"""A row's fields under their names from before the rename, still sent beside the new ones (API readers)."""


def _with_old_names(row: dict) -> dict:
    return row | {old: row[new] for old, new in OLD_NAMES.items()}


def problems(run: Run | int, problem_ids=None) -> list[dict]:
    """The per-problem table, or its rows for ``problem_ids``."""
    rows = ProblemStat.objects.filter(run=run)
    if problem_ids is not None:
        rows = rows.filter(problem_id__in=list(problem_ids))
    return [_with_old_names(dict(zip(PROBLEM_ROW, row)))
            for row in rows.order_by("problem_id").values_list(*PROBLEM_ROW)]


def event_read_models(run: Run | int, event: dict) -> dict:
    """What a live ``problem`` or ``eval`` message carries besides the event: the per-problem table's rows
    the event changed, as stored (``problem_row``; an evaluation's ``problem_rows``), and after a
    ``problem`` event the sandbox-health counts (``health``). The run page draws them as given."""
    kind = event.get("event")
    if kind == "problem" and isinstance(event.get("problem_id"), str):
        rows = problems(run, [event["problem_id"]])
        return {"health": sandbox_health(run)} | ({"problem_row": rows[0]} if rows else {})
    if kind == "eval" and isinstance(event.get("per_problem"), dict) and event["per_problem"]:
        return {"problem_rows": problems(run, [str(pid) for pid in event["per_problem"]])}
    return {}


MAP_STATUSES = ("became_solved", "never_solved", "solved_from_start")


def difficulty_map(run: Run) -> dict:
    """Each train problem's group pass rate at every step that sampled it (the run page's problems x
    steps heatmap), with what sorts and summarises it.

    A problem counts as solved at a step when at least one of its candidates passed every test there
    (pass rate > 0). ``status``: ``never_solved`` (no candidate passed at any step), ``became_solved``
    (unsolved the first time it was sampled, solved later), ``solved_from_start``.
    """
    rows = (ProblemStat.objects.filter(run=run).exclude(split="heldout").order_by("problem_id")
            .values_list("problem_id", "history", "zero_variance_steps", "set_aside_steps"))
    steps: set[int] = set()
    problems = []
    for problem_id, history, zero_variance, set_aside in rows:
        history = [[int(s), float(r)] for s, r in history]
        if not history:
            continue
        steps.update(s for s, _ in history)
        first_solved = next((s for s, r in history if r > 0), None)
        status = ("never_solved" if first_solved is None
                  else "solved_from_start" if first_solved == history[0][0] else "became_solved")
        problems.append({"problem_id": problem_id, "history": history, "zero_variance_steps": zero_variance,
                         "set_aside_steps": set_aside, "final_solve_rate": history[-1][1],
                         "final_pass_rate": history[-1][1],
                         "first_solved_step": first_solved, "zero_variance_groups": len(zero_variance),
                         "status": status})
    summary = {"problems": len(problems)} | {s: sum(p["status"] == s for p in problems) for s in MAP_STATUSES}
    return {"steps": sorted(steps), "problems": problems, "summary": summary}


def complete_tests(result: dict) -> list[dict]:
    """The result's tests, plus ``passed: false`` entries for tests counted in tests_total that never ran."""
    tests = [t for t in (result.get("tests") or []) if isinstance(t, dict)]
    total = result.get("tests_total")
    if isinstance(total, int) and total > len(tests):
        reason = f"not run: the program ended with {result.get('status', 'an error')} first"
        tests += [{"name": f"test {i + 1}", "passed": False, "error": reason, "time_s": 0.0}
                  for i in range(len(tests), total)]
    return [{**t, "passed": bool(t.get("passed"))} for t in tests]


def candidates(run: Run, problem_id: str, *, status: str | None = None, step: int | None = None,
               flag: str | None = None, phase: str | None = None) -> list[dict]:
    """The candidates of one problem, newest step first; ``flag`` keeps those whose result carries it
    (a name of sandbox/flags.py's vocabulary, checked by the caller); ``phase`` keeps a train problem's
    step candidates (``train``) or a held-out problem's evaluation samples (``eval``)."""
    qs = Candidate.objects.filter(run=run, problem_id=problem_id)
    if phase is not None:
        qs = qs.filter(phase=phase)
    if status == "passed":
        qs = qs.filter(passed=True)
    elif status == "failed":
        qs = qs.filter(passed=False)
    if step is not None:
        qs = qs.filter(step=step)
    if flag is not None and connection.features.supports_json_field_contains:
        qs = qs.filter(Q(result__flags__contains=[flag]) | Q(turns__contains=[{"flags": [flag]}]))
    out = []
    for c in qs.order_by("-step", "index"):
        turn_flags = [f for t in (c.turns or ()) if isinstance(t, dict) for f in (t.get("flags") or ())]
        if flag is not None and flag not in (c.result.get("flags") or ()) and flag not in turn_flags:
            continue  # SQLite has no JSON containment: the database kept them all
        result = dict(c.result)
        result["tests"] = complete_tests(result)
        out.append({"phase": c.phase, "step": c.step, "index": c.index, "code": c.code, "reward": c.reward,
                    "rewards": c.rewards, "passed": c.passed,
                    "outcome": OUTCOME_LABELS.get(c.status, c.status or "unknown"),
                    "truncated": c.truncated, "overlong_penalty": c.overlong_penalty,
                    "penalized_flags": c.penalized_flags, "used": not c.set_aside,
                    "set_aside": c.set_aside or None, "result": result, "turns": c.turns or []})
    return out


def checkpoints(run: Run) -> list[dict]:
    rows = list(Checkpoint.objects.filter(run=run).order_by("step", "kind"))
    at, best = dict(heldout_points(run)), best_checkpoint_ids(run, rows)
    return [{"id": c.pk, "step": c.step, "kind": c.kind, "path": c.path, "size_bytes": c.size_bytes,
             "download_url": f"/api/runs/{run.pk}/checkpoints/{c.pk}/download",
             "heldout_pass_at_1": at.get(c.step), "best": c.pk in best} for c in rows]


def sandbox_health(run: Run | int) -> dict:
    """Outcomes of the training candidates (the run page's sandbox-health panel, sent again with every live
    ``problem`` event) split into infrastructure failures and the candidates' own failures."""
    by_status = (Candidate.objects.filter(run=run, phase=Candidate.Phase.TRAIN).values("status")
                 .annotate(n=Count("id")))
    counts = {row["status"]: row["n"] for row in by_status}
    return {"counts": counts, "total": sum(counts.values()),
            "infrastructure": sum(counts.get(s, 0) for s in INFRASTRUCTURE),
            "wrong_answer": counts.get(Outcome.FAILED, 0),
            "errors": counts.get(Outcome.ERROR, 0) + counts.get(Outcome.SYNTAX_ERROR, 0),
            "timeouts": counts.get(Outcome.TIMEOUT, 0), "passed": counts.get(Outcome.PASSED, 0)}


def headline(run_evals: list[dict], split: str = "heldout") -> dict | None:
    """First and latest pass@1 on ``split``: {"before", "after", "delta"} in percent points."""
    points = [e for e in run_evals if e["split"] == split and e["pass@1"] is not None]
    if not points:
        return None
    before, after = points[0]["pass@1"] * 100, points[-1]["pass@1"] * 100
    return {"split": split, "before": round(before), "after": round(after), "delta": round(after) - round(before),
            "before_step": points[0]["step"], "after_step": points[-1]["step"]}


# ---- the run page's embedded state, spliced from the stored JSON text -----------------------------
# Decoding thousands of JSON cells only to encode them again was most of the run page's server time;
# the database already holds each cell as JSON text, so it is copied through as is.

def _raw(field: str):
    from django.db.models import TextField
    from django.db.models.functions import Cast

    return Cast(field, TextField())


def metrics_json(run: Run) -> str:
    rows = StepMetric.objects.filter(run=run).order_by("step").values_list("step", _raw("metrics"), "time")
    return "[" + ",".join(f'{{"step":{s},"metrics":{m},"time":{json.dumps(t)}}}' for s, m, t in rows) + "]"


def problems_json(run: Run) -> str:
    rows = (ProblemStat.objects.filter(run=run).order_by("problem_id")
            .values_list("problem_id", "split", "solve_rate", _raw("history"), "zero_variance_groups",
                         "solve_rate_turn1"))
    return "[" + ",".join(
        f'{{"problem_id":{json.dumps(pid)},"split":{json.dumps(split)},"solve_rate":{json.dumps(rate)},'
        f'"history":{history},"zero_variance_groups":{zv},"solve_rate_turn1":{json.dumps(turn1)},'
        f'"pass_rate":{json.dumps(rate)},"pass_rate_turn1":{json.dumps(turn1)}}}'
        for pid, split, rate, history, zv, turn1 in rows) + "]"


DIVERGENCE_WARNINGS = {"kind": "warning", "payload__has_key": "condition"}
"""Stored events that are divergence warnings (training/divergence.py): ``warning`` events with a ``condition``
(a tracker's warnings have none; webapp/runs/trackers.py shows those)."""


def run_warnings(run: Run) -> list[dict]:
    """The run's divergence warnings, in order: ``{source, condition, step, metric, value?, bound, message,
    since_step?}``."""
    keep = ("source", "condition", "step", "metric", "value", "bound", "message", "since_step")
    rows = RunEvent.objects.filter(run=run, **DIVERGENCE_WARNINGS).order_by("seq").values_list("payload", flat=True)
    return [{k: p[k] for k in keep if k in p} for p in rows if isinstance(p, dict)]

