"""Reward functions: what happened when a candidate ran, turned into numbers in [0, 1].

Each dimension is a small pure function registered by name in ``REWARDS``. The contract::

    def my_reward(ctx: RewardContext) -> float:   # must return a value in [0, 1]
        ...

    >>> ctx = RewardContext(code="def f():\\n    return 1\\n",
    ...                     result={"status": "passed", "tests_passed": 2, "tests_total": 2,
    ...                             "syntax_ok": True, "format_ok": True, "wall_time_s": 0.01},
    ...                     entry_point="f", time_limit_s=2.0)
    >>> pass_rate(ctx)
    1.0

A function sees one candidate and one execution result; anything that depends on the group (the
median length used by ``conciseness`` when a problem has no reference solution) is precomputed into the
context. ``score_candidate`` evaluates every dimension (averaging over repeated executions) and
``combine`` folds them with the user's ``RewardWeights`` into the weighted mean
``sum_d w_d r_d / sum_d w_d`` (or, with ``normalize=False``, the plain weighted sum). Clipping
(``reward.clip``) applies to the advantages, after the group baseline (see trainer). With
``reward.normalize: per_component`` the advantage estimator sees each dimension normalized within its group
before the weighting (``advantages.group_rewards``); the total here stays what users read.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from training.config import RewardWeights

DIMENSIONS = tuple(f.name for f in fields(RewardWeights))
"""The reward dimensions, in the order of the config's ``reward.weights`` (each is registered in ``REWARDS``)."""

# Efficiency: a passing run that uses at most this share of its time limit earns the full reward; the
# reward then falls linearly to 0 at the limit itself. A quarter of the limit leaves room for
# interpreter start-up and noisy machines while still punishing solutions that crawl.
EFFICIENT_SHARE = 0.25
# Conciseness: up to this many times the reference length earns the full reward, then it decays
# exponentially (e-folding every extra reference length), so rambling code is pushed back smoothly.
CONCISE_SLACK = 1.25

_FENCE_RE = re.compile(r"```")


@dataclass(frozen=True)
class RewardContext:
    """Everything a reward function may look at for one candidate and one execution."""

    code: str
    """The assembled program that was executed (prompt + completion, or the code of a chat reply)."""
    result: Mapping[str, Any]
    """The execution result as the documented JSON dict (``ExecutionResult.to_dict()``)."""
    text: str = ""
    """The raw generated text (completion or chat reply)."""
    prompt_style: str = "completion"
    """``completion`` or ``chat``: chat replies are expected to put the code in a fenced block."""
    kind: str = "function"
    """The problem kind: ``function`` (call-based) or ``stdio``."""
    entry_point: str | None = None
    """Name the program must define (function problems)."""
    time_limit_s: float = 2.0
    """The time limit the run was executed under (override or the problem's own)."""
    reference_length: float | None = None
    """Length (see ``code_length``) of the reference solution, or of the group median without one."""


RewardFn = Callable[[RewardContext], float]


def code_length(code: str) -> int:
    """Length of a program in non-whitespace characters: indentation style and blank lines don't count."""
    return sum(1 for ch in code if not ch.isspace())


def pass_rate(ctx: RewardContext) -> float:
    """Fraction of the problem's tests that ran and passed: ``tests_passed / tests_total``."""
    total = int(ctx.result.get("tests_total") or 0)
    if total <= 0:
        return 0.0
    return _unit(int(ctx.result.get("tests_passed") or 0) / total)


def syntax(ctx: RewardContext) -> float:
    """1 when the program compiles, else 0."""
    return 1.0 if ctx.result.get("syntax_ok") else 0.0


def efficiency(ctx: RewardContext) -> float:
    """Runtime within a reasonable share of the time limit; 0 unless every test passed.

    ``1`` for ``wall_time_s <= EFFICIENT_SHARE * limit``, falling linearly to ``0`` at the limit. A
    failed or timed-out run earns nothing here, otherwise fast wrong answers would be rewarded.
    """
    if ctx.result.get("status") != "passed":
        return 0.0
    limit = float(ctx.time_limit_s or 0.0)
    if limit <= 0:
        return 1.0
    used = ctx.result.get("wall_time_s")
    if used is None:
        used = ctx.result.get("cpu_time_s") or 0.0
    share = float(used) / limit
    if share <= EFFICIENT_SHARE:
        return 1.0
    return _unit((1.0 - share) / (1.0 - EFFICIENT_SHARE))


def conciseness(ctx: RewardContext) -> float:
    """Length relative to the reference (or the group median): smooth, 1 up to ``CONCISE_SLACK``×.

    ``r = len(code) / reference_length``; reward ``= exp(-max(0, r - CONCISE_SLACK))``. An empty
    program earns 0 (short is good, nothing is not).
    """
    length = code_length(ctx.code)
    if length == 0:
        return 0.0
    if not ctx.reference_length or ctx.reference_length <= 0:
        return 1.0
    ratio = length / ctx.reference_length
    return _unit(math.exp(-max(0.0, ratio - CONCISE_SLACK)))


def format_reward(ctx: RewardContext) -> float:
    """Output follows the required I/O format; the mean of the checks that apply.

    - the sandbox's own verdict ``format_ok`` (how the candidate was assembled);
    - chat: the reply puts its code in a fenced block;
    - function problems: the program defines ``entry_point`` (function or class, or assigns it);
    - stdio problems: the program reads standard input.
    """
    checks = [bool(ctx.result.get("format_ok", True))]
    if ctx.prompt_style == "chat":
        checks.append(len(_FENCE_RE.findall(ctx.text)) >= 2)
    if ctx.kind == "function" and ctx.entry_point:
        checks.append(_defines(ctx.code, ctx.entry_point))
    elif ctx.kind == "stdio":
        checks.append(any(token in ctx.code for token in ("input(", "sys.stdin", "stdin.read", "open(0")))
    return sum(checks) / len(checks)


REWARDS: dict[str, RewardFn] = {
    "pass_rate": pass_rate,
    "syntax": syntax,
    "efficiency": efficiency,
    "conciseness": conciseness,
    "format": format_reward,
}


def get_reward(name: str) -> RewardFn:
    """The reward function registered as ``name``; an unknown name raises listing the valid ones."""
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; valid rewards: {', '.join(sorted(REWARDS))}") from None


def register_reward(name: str, fn: RewardFn) -> None:
    """Add a reward dimension (it then needs a weight in the config to count)."""
    REWARDS[name] = fn


@dataclass
class CandidateScore:
    """Per-dimension rewards of one candidate and their weighted combination."""

    rewards: dict[str, float] = field(default_factory=dict)
    total: float = 0.0


def score_candidate(
    contexts: Sequence[RewardContext], weights: Mapping[str, float], normalize: bool = True
) -> CandidateScore:
    """Score one candidate from one or more executions (``repeats``): each dimension is averaged.

    Only dimensions with a weight are computed; every dimension in ``weights`` is reported, weight
    zero included, so that dashboards see all five.
    """
    if not contexts:
        raise ValueError("score_candidate needs at least one execution result")
    rewards: dict[str, float] = {}
    for name in weights:
        fn = get_reward(name)
        values = [fn(ctx) for ctx in contexts]
        value = sum(values) / len(values)
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"reward {name!r} returned {value!r}; reward functions must return a value in [0, 1]")
        rewards[name] = value
    return CandidateScore(rewards=rewards, total=combine(rewards, weights, normalize))


def combine(rewards: Mapping[str, float], weights: Mapping[str, float], normalize: bool = True) -> float:
    """Weighted mean ``sum_d w_d r_d / sum_d w_d`` (in [0, 1]); with ``normalize=False`` the plain
    weighted sum ``sum_d w_d r_d`` (``reward.weighted_mean`` in the run config)."""
    total_weight = sum(float(w) for w in weights.values())
    if total_weight <= 0:
        raise ValueError("reward weights must have a positive sum; set at least one weight above 0")
    weighted = sum(float(w) * rewards[name] for name, w in weights.items() if w)
    return weighted / total_weight if normalize else weighted


def weights_dict(weights: Any) -> dict[str, float]:
    """``RewardWeights`` (dataclass), a mapping or None (the defaults) as a ``{dimension: weight}`` dict."""
    if weights is None:
        weights = RewardWeights()
    if isinstance(weights, Mapping):
        out = {str(k): float(v) for k, v in weights.items()}
    else:
        out = {f.name: float(getattr(weights, f.name)) for f in fields(weights)}
    for name in out:
        get_reward(name)
    return out


def overlong_penalty(length: int, max_new_tokens: int, buffer_tokens: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the total reward:
    ``0`` while ``length <= L - B``, then ``((L - B) - length) / B`` down to ``-1`` at ``length = L``
    (``L = max_new_tokens``, ``B = buffer_tokens``, capped at ``L``). Generation stops at ``L``, so the
    penalty lies in [-1, 0]."""
    buffer = min(buffer_tokens, max_new_tokens)
    free = max_new_tokens - buffer
    if length <= free or buffer <= 0:
        return 0.0
    return max(-1.0, (free - length) / buffer)


def penalized_flags(results: Sequence[Mapping[str, Any]], penalize: Sequence[str]) -> list[str]:
    """The flags of ``penalize`` that any execution of a candidate carries (``reward.penalize_flags``):
    when there are some, the candidate's total reward is 0 (sandbox/flags.py defines the flags)."""
    if not penalize:
        return []
    carried = {f for res in results for f in (res.get("flags") or ())}
    return [f for f in penalize if f in carried]


def total_reward(combined: float, overlong_penalty: float = 0.0, penalized: Sequence[str] = ()) -> float:
    """A candidate's total reward, the one its group advantage is computed from: the combined dimensions
    (``combine``) plus the overlong penalty (``overlong_penalty``, 0 unless ``reward.overlong`` is soft),
    or 0 when it carries a flag of ``reward.penalize_flags`` (``penalized_flags``)."""
    return 0.0 if penalized else combined + overlong_penalty


def group_median_length(codes: Sequence[str]) -> float | None:
    """Median ``code_length`` of a group's non-empty programs (conciseness baseline without a reference)."""
    lengths = [code_length(c) for c in codes if code_length(c) > 0]
    return float(statistics.median(lengths)) if lengths else None


def _defines(code: str, name: str) -> bool:
    try:
        # Model output is arbitrary: silence its SyntaxWarnings (they would flood the trainer's
        # stderr) and survive degenerate nesting ("------...1") that overflows the parser.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # a program that does not compile defines nothing
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _unit(value: float) -> float:
    return min(1.0, max(0.0, float(value)))
