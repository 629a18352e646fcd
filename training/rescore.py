"""What-if re-scoring: a run's stored candidates under other reward weights, without retraining.

A stored candidate keeps its per-dimension rewards, the flags of its execution and its overlong
penalty, so its total under other weights is the trainer's own arithmetic on them (``rewards.combine``,
``rewards.penalized_flags``, ``rewards.total_reward``) and its group advantage the trainer's own
estimator on the group's new totals (``advantages.compute_advantages``, then ``clip_advantages``, on a
float32 ``(G, K)`` tensor as the trainer builds it). Nothing here re-implements that math.

What changed, per step and per problem (a group is one problem's candidates at one step):

- ``sign_flips``: the share of candidates whose advantage changes sign. The sign of a candidate in a
  group with no signal (``advantages.zero_variance_groups``: every candidate got one reward) is 0, so a
  group that gains or loses its signal counts as well as a + <-> - swap.
- ``rank_corr``: the mean over groups of Spearman's rank correlation between the totals before and
  after (ties share their average rank). A group tied on both sides counts 1 (no order, and none lost);
  a group tied on one side only counts 0 (its order appeared or vanished).

"Before" is the stored total, the reward training used (recomputed under the run's own weights only
where none was stored). Example::

    before = RewardSettings(weights={"pass_rate": 0.6, "syntax": 0.4}, advantage="grpo", clip=5.0)
    out = rescore(candidates, before, {"pass_rate": 1.0, "syntax": 0.0})
    out["steps"][0]   # {"step": 3, "sign_flips": 0.25, "rank_corr": 0.8, ...}
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from training import rewards as R
from training.advantages import clip_advantages, compute_advantages, zero_variance_groups
from training.config import ConfigError, RunConfig


@dataclass(frozen=True)
class StoredCandidate:
    """One candidate as a run stored it (the ``problem`` events' candidates)."""

    step: int
    problem_id: str
    index: int
    """Its place in the group (0-based)."""
    rewards: Mapping[str, float]
    """Per-dimension rewards, each in [0, 1] (averaged over ``reward.repeats`` executions)."""
    reward: float | None = None
    """The stored total training used; None: recomputed under the run's own weights."""
    flags: tuple[str, ...] = ()
    """Reward-hacking flags its execution carries (``reward.penalize_flags`` zeroes the total)."""
    overlong_penalty: float = 0.0
    """``reward.overlong: soft``: the length penalty in its total (in [-1, 0])."""


@dataclass(frozen=True)
class RewardSettings:
    """The parts of a run config that turn per-dimension rewards into advantages."""

    weights: Mapping[str, float]
    """``reward.weights``: weight of each dimension."""
    normalize: bool = True
    """``reward.normalize``: weighted mean (True) or weighted sum."""
    clip: float | None = 5.0
    """``reward.clip``: advantages clamped to [-clip, clip]; None = no clipping."""
    advantage: str = "grpo"
    """``ppo.advantage``: the estimator's registered name."""
    penalize_flags: tuple[str, ...] = ()
    """``reward.penalize_flags``: flags whose candidates get a total of 0."""

    @classmethod
    def from_config(cls, cfg: RunConfig) -> "RewardSettings":
        return cls(weights=cfg.reward.weights.as_dict(), normalize=cfg.reward.normalize, clip=cfg.reward.clip,
                   advantage=cfg.ppo.advantage, penalize_flags=tuple(cfg.reward.penalize_flags))


def total_under(candidate: StoredCandidate, settings: RewardSettings) -> float:
    """The total reward training would give ``candidate`` under ``settings`` (see module docstring).

    A dimension with a positive weight that the candidate has no stored reward for raises ConfigError
    naming that dimension (its value is unknown, not 0).
    """
    for name, weight in settings.weights.items():
        if weight and name not in candidate.rewards:
            raise ConfigError(name, f"the run stored no {name!r} reward for its candidates (step "
                                    f"{candidate.step}, {candidate.problem_id}); give it weight 0")
    penalized = R.penalized_flags([{"flags": candidate.flags}], settings.penalize_flags)
    combined = R.combine(candidate.rewards, settings.weights, settings.normalize)
    return R.total_reward(combined, candidate.overlong_penalty, penalized)


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``; equal values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    lo = 0
    while lo < len(order):
        hi = lo
        while hi + 1 < len(order) and values[order[hi + 1]] == values[order[lo]]:
            hi += 1
        for k in range(lo, hi + 1):
            ranks[order[k]] = (lo + hi) / 2 + 1
        lo = hi + 1
    return ranks


def rank_correlation(before: Sequence[float], after: Sequence[float]) -> float:
    """Spearman's rho of two orderings of one group: Pearson's correlation of their average ranks.

    1 when both are tied throughout, 0 when only one is (see module docstring).
    """
    rb, ra = average_ranks(before), average_ranks(after)
    mb, ma = sum(rb) / len(rb), sum(ra) / len(ra)
    cov = sum((x - mb) * (y - ma) for x, y in zip(rb, ra))
    var_b, var_a = sum((x - mb) ** 2 for x in rb), sum((y - ma) ** 2 for y in ra)
    if var_b == 0 and var_a == 0:
        return 1.0
    if var_b == 0 or var_a == 0:
        return 0.0
    return max(-1.0, min(1.0, cov / math.sqrt(var_b * var_a)))


@dataclass
class _Group:
    step: int
    problem_id: str
    candidates: list[StoredCandidate]
    before: list[float] = dataclasses.field(default_factory=list)
    after: list[float] = dataclasses.field(default_factory=list)
    advantage_before: list[float] = dataclasses.field(default_factory=list)
    advantage_after: list[float] = dataclasses.field(default_factory=list)
    flipped: list[bool] = dataclasses.field(default_factory=list)
    """Per candidate: its advantage changes sign (see module docstring)."""
    rank_corr: float = 1.0
    zero_variance_before: bool = False
    zero_variance_after: bool = False
    seen_before: list[float] = dataclasses.field(default_factory=list)
    """The float32 totals the advantages were computed from (ranks use these: a tie there is a tie here)."""
    seen_after: list[float] = dataclasses.field(default_factory=list)


def rescore(candidates: Iterable[StoredCandidate], before: RewardSettings, weights: Mapping[str, float], *,
            top: int = 10) -> dict:
    """Re-score ``candidates`` with ``weights`` in place of ``before.weights`` (everything else as the run).

    Returns plain JSON data::

        {"steps": [{"step", "sign_flips", "rank_corr", "candidates", "groups",
                    "zero_variance_before", "zero_variance_after"}],            # by step
         "problems": [{"problem_id", "rank_corr", "sign_flips", "groups",
                       "candidates": [{"step", "index", "reward_before", "reward_after",
                                       "advantage_before", "advantage_after", "sign_flip"}]}],  # ``top``
         "summary": {"candidates", "groups", "sign_flips", "rank_corr"}}

    Problems are ordered by their mean rank correlation (lowest first), then by sign flips. A group
    of fewer than 2 candidates has no advantage (as in training) and is left out.
    """
    after = dataclasses.replace(before, weights=R.weights_dict(weights))
    by_group: dict[tuple[int, str], list[StoredCandidate]] = defaultdict(list)
    for c in candidates:
        by_group[(c.step, c.problem_id)].append(c)
    groups = [_Group(step, pid, sorted(cs, key=lambda c: c.index))
              for (step, pid), cs in sorted(by_group.items()) if len(cs) >= 2]
    for g in groups:
        g.before = [c.reward if c.reward is not None else total_under(c, before) for c in g.candidates]
        g.after = [total_under(c, after) for c in g.candidates]

    # One tensor per group size (a run has one size; dynamic sampling may leave others).
    by_size: dict[int, list[_Group]] = defaultdict(list)
    for g in groups:
        by_size[len(g.candidates)].append(g)
    for same in by_size.values():
        _advantages(same, before)

    for g in groups:
        signs_before = _signs(g.advantage_before, g.zero_variance_before)
        signs_after = _signs(g.advantage_after, g.zero_variance_after)
        g.flipped = [b != a for b, a in zip(signs_before, signs_after)]

    return {"steps": _per_step(groups), "problems": _per_problem(groups, top),
            "summary": {**_aggregate(groups), "candidates": _count(groups)}}


def _advantages(groups: list[_Group], settings: RewardSettings) -> None:
    """Fill each group's advantages and zero-variance marks from the trainer's functions."""
    for side in ("before", "after"):
        rewards = torch.tensor([getattr(g, side) for g in groups], dtype=torch.float32)  # (G, K) as the trainer's
        advantages = clip_advantages(compute_advantages(settings.advantage, rewards), settings.clip)  # (G, K)
        zero_var = zero_variance_groups(rewards)  # (G,)
        for g, adv, zv, seen in zip(groups, advantages.tolist(), zero_var.tolist(), rewards.tolist()):
            setattr(g, f"advantage_{side}", adv)
            setattr(g, f"zero_variance_{side}", bool(zv))
            setattr(g, f"seen_{side}", seen)
    for g in groups:
        g.rank_corr = rank_correlation(g.seen_before, g.seen_after)


def _signs(advantages: Sequence[float], zero_variance: bool) -> list[int]:
    if zero_variance:
        return [0] * len(advantages)
    return [(a > 0) - (a < 0) for a in advantages]


def _per_step(groups: list[_Group]) -> list[dict]:
    steps: dict[int, list[_Group]] = defaultdict(list)
    for g in groups:
        steps[g.step].append(g)
    return [{"step": step, **_aggregate(gs), "candidates": _count(gs),
             "zero_variance_before": sum(g.zero_variance_before for g in gs),
             "zero_variance_after": sum(g.zero_variance_after for g in gs)} for step, gs in sorted(steps.items())]


def _per_problem(groups: list[_Group], top: int) -> list[dict]:
    problems: dict[str, list[_Group]] = defaultdict(list)
    for g in groups:
        problems[g.problem_id].append(g)
    rows = [{"problem_id": pid, **_aggregate(gs), "candidates": [
        {"step": g.step, "index": c.index, "reward_before": rb, "reward_after": ra,
         "advantage_before": ab, "advantage_after": aa, "sign_flip": flip}
        for g in gs for c, rb, ra, ab, aa, flip in zip(g.candidates, g.before, g.after, g.advantage_before,
                                                       g.advantage_after, g.flipped)]}
        for pid, gs in problems.items()]
    rows.sort(key=lambda r: (r["rank_corr"], -r["sign_flips"], r["problem_id"]))
    return rows[:top]


def _count(groups: list[_Group]) -> int:
    return sum(len(g.candidates) for g in groups)


def _aggregate(groups: list[_Group]) -> dict:
    n = _count(groups)
    return {"sign_flips": sum(sum(g.flipped) for g in groups) / n if n else 0.0,
            "rank_corr": sum(g.rank_corr for g in groups) / len(groups) if groups else 1.0,
            "groups": len(groups)}
