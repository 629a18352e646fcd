"""What-if re-scoring of a run's stored candidates (``POST /api/runs/{id}/rescore``, the run page's panel).

The arithmetic is training's (``training.rescore``, on training's reward and advantage functions);
this module validates the request as a run config would, reads the candidates of the step range and
hands them over as plain data.

A penalised flag is read from a candidate's stored result, which is its first execution's: with
``reward.repeats`` > 1 a flag raised only by a later execution is not seen here (its stored total,
the "before", still is what training used). A multi-turn candidate's stored turns (each with its
rewards, total, flags of every execution and overlong penalty) are handed over too, so its turns are
credited as training credited them (``reward.turns``).

``training.rescore`` needs torch (the advantage estimators are tensor functions), which the web
server does not load at start (tests/test_layers.py) and which takes seconds to import. A run page
that has stored candidates to re-score starts that import in the background (``warm_up``), so the
panel's first answer does not wait for it; a re-scoring that comes first imports it itself.
"""
from __future__ import annotations

import importlib
import math
import sys
import threading
from typing import Any

from training.config import ConfigError, config_from_dict

from .models import Candidate, Run

DEFAULT_STEPS = 10
"""Steps re-scored when the request names none: the last 10 with stored candidates."""
MAX_STEPS = 100
"""Most steps one request re-scores: bounds the work and the answer of one request."""
MAX_TOP = 100


def run_reward_config(run: Run):
    """The run's own reward settings (``training.rescore.RewardSettings``'s inputs) as a RunConfig.

    Only the sections that decide rewards and advantages are read, so a stored config whose other
    parts no longer validate (a removed backend, say) still re-scores.
    """
    stored = run.config or {}
    sections = {k: stored[k] for k in ("reward", "ppo", "sampling") if isinstance(stored.get(k), dict)}
    try:
        return config_from_dict(sections)
    except ConfigError as exc:
        raise ConfigError("config", f"this run's stored config does not validate any more ({exc}); "
                                    "it cannot be re-scored") from None


def parse_weights(weights: Any, base: dict[str, float]) -> dict[str, float]:
    """``weights`` merged over the run's ``base`` weights and validated as ``reward.weights`` is.

    Raises ConfigError whose field is ``weights`` or ``weights.<dimension>``.
    """
    if weights is None:
        weights = {}
    if not isinstance(weights, dict):
        raise ConfigError("weights", f"must be a mapping of dimension to weight, e.g. {{\"pass_rate\": 1.0}}; "
                                     f"got {weights!r}")
    try:
        cfg = config_from_dict({"reward": {"weights": {**base, **weights}}})
    except ConfigError as exc:
        field = "weights" + exc.field.removeprefix("reward.weights")
        raise ConfigError(field, exc.message) from None
    return cfg.reward.weights.as_dict()


def stored_steps(run: Run) -> tuple[int, int] | None:
    """The first and last step with stored candidates; None before the first."""
    from django.db.models import Max, Min

    bounds = Candidate.objects.filter(run=run, phase=Candidate.Phase.TRAIN).aggregate(lo=Min("step"), hi=Max("step"))
    return None if bounds["hi"] is None else (bounds["lo"], bounds["hi"])


def parse_steps(requested: Any) -> tuple[int, int] | None:
    """``[from, to]`` as two step numbers in order (None: not given). Raises ConfigError naming ``steps``."""
    if requested is None:
        return None
    if (not isinstance(requested, (list, tuple)) or len(requested) != 2
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in requested)):
        raise ConfigError("steps", f"must be [from, to], two step numbers; got {requested!r}")
    first, last = requested
    if first > last:
        raise ConfigError("steps", f"from must not be after to; got [{first}, {last}]")
    return first, last


def step_range(requested: tuple[int, int] | None, stored: tuple[int, int]) -> tuple[int, int]:
    """``[from, to]`` clamped to the stored steps; None: the last ``DEFAULT_STEPS``. Raises ConfigError
    naming ``steps`` when it holds no stored step or is too long."""
    lo, hi = stored
    if requested is None:
        return max(lo, hi - DEFAULT_STEPS + 1), hi
    first, last = requested
    if last < lo or first > hi:
        raise ConfigError("steps", f"no stored candidates in [{first}, {last}]; this run has steps {lo} to {hi}")
    first, last = max(first, lo), min(last, hi)
    if last - first + 1 > MAX_STEPS:
        raise ConfigError("steps", f"at most {MAX_STEPS} steps at a time; got [{first}, {last}] "
                                   f"({last - first + 1} steps)")
    return first, last


def rescore_run(run: Run, weights: Any = None, steps: Any = None, top: int = 10) -> dict:
    """The what-if answer for ``run`` (docs/design.md "Web (webapp/)": ``POST /api/runs/{id}/rescore``)
    plus what it used: ``weights`` (after the merge), ``weights_before``, ``range`` ([from, to] after
    clamping; null when nothing is stored yet) and ``summary``. Raises ConfigError naming the bad field."""
    cfg = run_reward_config(run)
    base = cfg.reward.weights.as_dict()
    new_weights = parse_weights(weights, base)
    if not 1 <= top <= MAX_TOP:
        raise ConfigError("top", f"must be between 1 and {MAX_TOP}; got {top}")
    requested = parse_steps(steps)
    stored = stored_steps(run)
    out = {"weights": new_weights, "weights_before": base, "range": None, "steps": [], "problems": [],
           "summary": {"candidates": 0, "groups": 0, "sign_flips": 0.0, "rank_corr": 1.0}}
    if stored is None:
        return out
    first, last = step_range(requested, stored)

    from training.rescore import RewardSettings, StoredCandidate, rescore  # loads torch: not at web start

    rows = (Candidate.objects.filter(run=run, phase=Candidate.Phase.TRAIN, step__gte=first, step__lte=last)
            .values_list("step", "problem_id", "index", "reward", "rewards", "result__flags", "overlong_penalty",
                         "status", "turns"))
    candidates, outcomes = [], {}
    for step, problem_id, index, reward, rewards, flags, penalty, status, turns in rows:
        candidates.append(StoredCandidate(
            step=step, problem_id=problem_id, index=index, rewards=_numbers(rewards),
            reward=reward if _finite(reward) else None, flags=_flags(flags),
            overlong_penalty=penalty if _finite(penalty) else 0.0, turns=_turns(turns)))
        outcomes[(step, problem_id, index)] = status
    try:
        answer = rescore(candidates, RewardSettings.from_config(cfg), new_weights, top=top)
    except ConfigError as exc:  # a weighted dimension this run never stored
        raise exc.prefixed("weights") from None
    for problem in answer["problems"]:
        for c in problem["candidates"]:
            c["status"] = outcomes.get((c["step"], problem["problem_id"], c["index"]), "")
    return out | answer | {"range": [first, last]}


_warm_up_started = threading.Event()


def warm_up() -> threading.Thread | None:
    """Import ``training.rescore`` (and torch) in a background thread, once per process -> the thread,
    or None where it is imported or on its way. A re-scoring that arrives meanwhile waits on the
    import lock for the rest of the same import, never starts a second one."""
    if "training.rescore" in sys.modules or _warm_up_started.is_set():
        return None
    _warm_up_started.set()
    thread = threading.Thread(target=importlib.import_module, args=("training.rescore",),
                              name="crucible-rescore-warm-up", daemon=True)
    thread.start()
    return thread


def panel_context(run: Run) -> dict:
    """What the run page's what-if panel (templates/runs/_whatif.html) starts from."""
    from training.config import field_docs

    docs = field_docs()["RewardWeights"]
    try:
        cfg = run_reward_config(run)
    except ConfigError:
        cfg = config_from_dict({})
    stored = stored_steps(run)
    if stored:
        warm_up()  # the panel can be used: have its arithmetic loaded by the time it is
    weights = cfg.reward.weights.as_dict()
    return {"dimensions": [(name, f"{value:g}", docs.get(name, "")) for name, value in weights.items()],
            "stored": stored, "advantage": cfg.ppo.advantage, "default_steps": DEFAULT_STEPS,
            "turns": cfg.reward.turns if cfg.sampling.turns > 1 else None,
            "default_from": step_range(None, stored)[0] if stored else None}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _flags(flags: Any) -> tuple[str, ...]:
    return tuple(f for f in flags if isinstance(f, str)) if isinstance(flags, list) else ()


def _turns(turns: Any) -> tuple:
    """A multi-turn candidate's stored turns as ``training.rescore.StoredTurn``s (empty for one turn)."""
    from training.rescore import StoredTurn  # loads torch: not at web start

    if not isinstance(turns, list):
        return ()
    out = []
    for turn in turns:
        turn = turn if isinstance(turn, dict) else {}
        reward, penalty = turn.get("reward"), turn.get("overlong_penalty")
        out.append(StoredTurn(rewards=_numbers(turn.get("rewards")), reward=reward if _finite(reward) else None,
                              flags=_flags(turn.get("flags")), overlong_penalty=penalty if _finite(penalty) else None))
    return tuple(out)


def _numbers(rewards: Any) -> dict[str, float]:
    """The stored per-dimension rewards that are numbers (a malformed one counts as not stored)."""
    if not isinstance(rewards, dict):
        return {}
    return {str(k): float(v) for k, v in rewards.items() if _finite(v)}
