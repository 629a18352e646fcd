"""The run page's reward integrity: the sandbox's reward-hacking flags (sandbox/flags.py) on a run.

Per step from the ``flags/<name>`` step metrics (candidates carrying each flag), in total, and on
the newest candidates that carry one; badges for the candidate viewer. A flag is a lead to read the
code; it costs a reward only for the names in the run's ``reward.penalize_flags``.
"""
from __future__ import annotations

import operator
from functools import reduce
from typing import Iterable

from django.db import connection
from django.db.models import Q
from django.db.models.fields.json import KeyTransform

from sandbox.flags import FLAGS, VOCABULARY

from .models import Candidate, Run, StepMetric
from .queries import OUTCOME_LABELS

LATEST = 10
"""How many flagged candidates the panel lists, newest first."""


def badges(flags: Iterable[str], penalized: Iterable[str] = ()) -> list[dict]:
    """One badge per flag of a candidate, vocabulary order first: ``{name, meaning, penalized}``.

    A penalized flag is carried by some execution even when the first one (the stored result) lacks it.
    """
    penalized = set(penalized)
    names = list(dict.fromkeys([*flags, *penalized]))
    names.sort(key=lambda f: VOCABULARY.index(f) if f in FLAGS else len(VOCABULARY))
    return [{"name": f, "meaning": FLAGS.get(f, "a flag this server's vocabulary does not know"),
             "penalized": f in penalized} for f in names]


def penalized_names(run: Run) -> list[str]:
    """The run's ``reward.penalize_flags`` (runs stored before it existed have none)."""
    return list((run.config or {}).get("reward", {}).get("penalize_flags") or [])


def series(run: Run) -> dict:
    """The ``flags/<name>`` step metrics as columns: ``{steps, candidates, counts: {name: [...]}}``,
    ``None`` where a step lacks the key (steps of a trainer from before the flags).

    Only those keys leave the database: the metrics cells are otherwise decoded only by the page's JS.
    """
    columns = {f"f{i}": KeyTransform(f"flags/{name}", "metrics") for i, name in enumerate(VOCABULARY)}
    rows = (StepMetric.objects.filter(run=run).order_by("step")
            .annotate(n_candidates=KeyTransform("candidates", "metrics"), **columns)
            .values_list("step", "n_candidates", *columns))
    steps, candidates, counts = [], [], {name: [] for name in VOCABULARY}
    for step, n, *values in rows:
        steps.append(step)
        candidates.append(_count(n))
        for name, value in zip(VOCABULARY, values):
            counts[name].append(_count(value))
    return {"steps": steps, "candidates": candidates, "counts": counts}


def _count(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def totals(run: Run, data: dict | None = None) -> dict:
    """Per flag its meaning, the candidates carrying it at the newest step and over all steps, and
    whether the run penalizes it; ``reported``: whether the run's trainer reports flags at all."""
    data = series(run) if data is None else data
    penalized = set(penalized_names(run))
    rows = []
    for name in VOCABULARY:
        values = data["counts"][name]
        known = [v for v in values if v is not None]
        rows.append({"name": name, "meaning": FLAGS[name], "penalized": name in penalized,
                     "last": values[-1] if values else None, "total": sum(known) if known else None})
    reported = any(r["total"] is not None for r in rows)
    steps = data["steps"]
    return {"rows": rows, "reported": reported, "steps": len(steps), "last_step": steps[-1] if steps else None,
            "last_candidates": data["candidates"][-1] if steps else None,
            "flagged_total": sum(r["total"] or 0 for r in rows)}


def latest_flagged(run: Run, limit: int = LATEST, data: dict | None = None) -> list[dict]:
    """The newest candidates whose result carries a flag: ``{step, problem_id, index, reward, outcome,
    passed, badges, penalized}``, newest step first.

    Only the newest steps whose ``flags/<name>`` metrics promise ``limit`` flagged candidates are read:
    a long run stores hundreds of thousands of candidates, most of them never flagged.
    """
    data = series(run) if data is None else data
    steps, promised = [], 0
    for i in reversed(range(len(data["steps"]))):
        at_least = max((column[i] or 0 for column in data["counts"].values()), default=0)
        if at_least:
            steps.append(data["steps"][i])
            promised += at_least
            if promised >= limit:
                break
    if not steps:
        return []
    rows = (Candidate.objects.filter(run=run, phase=Candidate.Phase.TRAIN, step__in=steps)
            .order_by("-step", "problem_id", "index")
            .values_list("step", "problem_id", "index", "reward", "status", "result__flags", "penalized_flags"))
    if connection.features.supports_json_field_contains:
        rows = rows.filter(reduce(operator.or_, (Q(result__flags__contains=[f]) for f in VOCABULARY)))[:limit]
    out = []
    for step, problem_id, index, reward, status, flags, penalized in rows:
        flags = names_of(flags)
        if not flags:
            continue  # SQLite has no JSON containment: the database kept them all
        out.append({"step": step, "problem_id": problem_id, "index": index, "reward": reward,
                    "outcome": OUTCOME_LABELS.get(status, status or "unknown"), "passed": status == "passed",
                    "badges": badges(flags, names_of(penalized)), "penalized": bool(names_of(penalized))})
        if len(out) >= limit:
            break
    return out


def names_of(value) -> list[str]:
    """A stored list of flag names (a result's ``flags``, ``penalized_flags``); anything else is none."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def carried_flags(candidate: dict) -> list[str]:
    """The flags of a ``queries.candidates`` row: its result's, and, for a repair trajectory, every turn's
    (a turn that hard-codes what the feedback showed is flagged even when the last turn is clean)."""
    names = names_of(candidate["result"].get("flags"))
    for turn in candidate.get("turns") or ():
        if isinstance(turn, dict):
            names += names_of(turn.get("flags"))
    return list(dict.fromkeys(names))


def flag_counts(candidates: list[dict]) -> dict[str, int]:
    """How many of ``candidates`` (``queries.candidates`` rows) carry each flag (``carried_flags``),
    vocabulary order, flags that none carries left out: the viewer's flag filter."""
    carried = [set(carried_flags(c)) for c in candidates]
    counts = {name: sum(name in flags for flags in carried) for name in VOCABULARY}
    return {name: n for name, n in counts.items() if n}


def panel(run: Run) -> dict:
    """Everything ``templates/runs/_integrity.html`` shows, and the series its chart starts from."""
    data = series(run)
    return {"series": data, "penalize": penalized_names(run), "latest": latest_flagged(run, data=data),
            **totals(run, data)}
