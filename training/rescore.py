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

Multi-turn candidates (``sampling.turns > 1``) are re-scored as training credits them (``reward.turns``):

- ``final``: a trajectory's total is its last turn's (0 when any turn carries a penalised flag), one
  advantage per trajectory as above.
- ``discounted``: each turn's own total ``r_t`` (its own flags and overlong penalty), its return
  ``G_t = sum_{s >= t} gamma^(s - t) r_s`` and the group's pool of returns through
  ``advantages.turn_advantages``: one advantage per turn. Sign flips then count turns (each turn's
  tokens carry their own advantage), the rank correlation ranks the pool of returns, and a candidate's
  own ``reward``/``advantage`` are its first turn's return and advantage (the whole trajectory's).

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
from training.advantages import (clip_advantages, compute_advantages, discounted_returns, group_rewards,
                                 turn_advantages, zero_variance_groups)
from training.config import ConfigError, RunConfig


@dataclass(frozen=True)
class StoredTurn:
    """One turn of a multi-turn candidate as the run stored it (the candidate's ``turns``)."""

    rewards: Mapping[str, float]
    """The turn's per-dimension rewards."""
    reward: float | None = None
    """The turn's stored total training used; None: recomputed under the run's own weights."""
    flags: tuple[str, ...] = ()
    """Reward-hacking flags of the turn's executions."""
    overlong_penalty: float | None = None
    """The length penalty in the turn's total; None where the run did not store it (runs recorded before
    it was): then the stored total less its combined dimensions under the run's weights (0 if flagged)."""


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
    turns: tuple[StoredTurn, ...] = ()
    """Multi-turn repair: every turn (the candidate's own fields are its last turn's); empty for one turn."""


@dataclass(frozen=True)
class RewardSettings:
    """The parts of a run config that turn per-dimension rewards into advantages."""

    weights: Mapping[str, float]
    """``reward.weights``: weight of each dimension."""
    weighted_mean: bool = True
    """``reward.weighted_mean``: weighted mean (True) or weighted sum."""
    normalize: str = "sum"
    """``reward.normalize``: sum, or per_component (each dimension normalized within its group before the
    weighting: the advantages come from ``advantages.group_rewards``; the totals stay the plain ones)."""
    clip: float | None = 5.0
    """``reward.clip``: advantages clamped to [-clip, clip]; None = no clipping."""
    advantage: str = "grpo"
    """``ppo.advantage``: the estimator's registered name."""
    penalize_flags: tuple[str, ...] = ()
    """``reward.penalize_flags``: flags whose candidates get a total of 0."""
    turns: str = "final"
    """``reward.turns`` of a multi-turn run (``final`` for a one-turn run): how turns are credited."""
    turn_discount: float = 0.4
    """``reward.turn_discount``: gamma of ``reward.turns: discounted``."""

    @classmethod
    def from_config(cls, cfg: RunConfig) -> "RewardSettings":
        return cls(weights=cfg.reward.weights.as_dict(), weighted_mean=cfg.reward.weighted_mean,
                   normalize=cfg.reward.normalize, clip=cfg.reward.clip,
                   advantage=cfg.ppo.advantage, penalize_flags=tuple(cfg.reward.penalize_flags),
                   turns=cfg.reward.turns if cfg.sampling.turns > 1 else "final",
                   turn_discount=cfg.reward.turn_discount)


def total_under(candidate: StoredCandidate, settings: RewardSettings) -> float:
    """The total reward training would give ``candidate`` under ``settings`` (see module docstring); for a
    multi-turn candidate its trajectory's (``reward.turns: final``): its last turn's, 0 when any turn
    carries a penalised flag.

    A dimension with a positive weight that the candidate has no stored reward for raises ConfigError
    naming that dimension (its value is unknown, not 0).
    """
    _check_stored(candidate.rewards, settings, candidate)
    flags = candidate.flags + tuple(f for t in candidate.turns for f in t.flags)
    penalized = R.penalized_flags([{"flags": flags}], settings.penalize_flags)
    combined = R.combine(candidate.rewards, settings.weights, settings.weighted_mean)
    return R.total_reward(combined, candidate.overlong_penalty, penalized)


def turn_totals_under(candidate: StoredCandidate, settings: RewardSettings, run: RewardSettings) -> list[float]:
    """Each turn's own total under ``settings`` (``reward.turns: discounted``: the ``r_t`` of its returns):
    its combined dimensions plus its overlong penalty, 0 when it carries a penalised flag. ``run`` are the
    run's own settings (a turn's penalty the run did not store is inferred under them). A one-turn
    candidate is one turn, its total ``total_under``'s."""
    if not candidate.turns:
        return [total_under(candidate, settings)]
    out = []
    for turn in candidate.turns:
        _check_stored(turn.rewards, settings, candidate)
        penalized = R.penalized_flags([{"flags": turn.flags}], settings.penalize_flags)
        combined = R.combine(turn.rewards, settings.weights, settings.weighted_mean)
        out.append(R.total_reward(combined, _turn_penalty(turn, run, candidate), penalized))
    return out


def _turn_penalty(turn: StoredTurn, run: RewardSettings, candidate: StoredCandidate) -> float:
    if turn.overlong_penalty is not None:
        return turn.overlong_penalty
    if turn.reward is None or R.penalized_flags([{"flags": turn.flags}], run.penalize_flags):
        return 0.0
    _check_stored(turn.rewards, run, candidate)
    return max(-1.0, min(0.0, turn.reward - R.combine(turn.rewards, run.weights, run.weighted_mean)))


def _check_stored(rewards: Mapping[str, float], settings: RewardSettings, candidate: StoredCandidate) -> None:
    for name, weight in settings.weights.items():
        if weight and name not in rewards:
            raise ConfigError(name, f"the run stored no {name!r} reward for its candidates (step "
                                    f"{candidate.step}, {candidate.problem_id}); give it weight 0")


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
    """One problem's candidates at one step. Its *units* are what the estimator compares: one total per
    candidate, or with ``reward.turns: discounted`` one return per turn of each candidate."""

    step: int
    problem_id: str
    candidates: list[StoredCandidate]
    before: list[float] = dataclasses.field(default_factory=list)
    """Per unit: the value the advantages are computed from (a total, or a turn's return)."""
    after: list[float] = dataclasses.field(default_factory=list)
    spans: list[range] = dataclasses.field(default_factory=list)
    """Per candidate: its units."""
    turns_before: list[list[float]] = dataclasses.field(default_factory=list)
    """Per candidate: each turn's own total (multi-turn candidates)."""
    turns_after: list[list[float]] = dataclasses.field(default_factory=list)
    advantage_before: list[float] = dataclasses.field(default_factory=list)
    advantage_after: list[float] = dataclasses.field(default_factory=list)
    flipped: list[bool] = dataclasses.field(default_factory=list)
    """Per unit: its advantage changes sign (see module docstring)."""
    rank_corr: float = 1.0
    zero_variance_before: bool = False
    zero_variance_after: bool = False
    seen_before: list[float] = dataclasses.field(default_factory=list)
    """The float32 values the advantages were computed from (ranks use these: a tie there is a tie here)."""
    seen_after: list[float] = dataclasses.field(default_factory=list)


def rescore(candidates: Iterable[StoredCandidate], before: RewardSettings, weights: Mapping[str, float], *,
            top: int = 10) -> dict:
    """Re-score ``candidates`` with ``weights`` in place of ``before.weights`` (everything else as the run).

    Returns plain JSON data::

        {"steps": [{"step", "sign_flips", "rank_corr", "candidates", "groups",
                    "zero_variance_before", "zero_variance_after"}],            # by step
         "problems": [{"problem_id", "rank_corr", "sign_flips", "groups",
                       "candidates": [{"step", "index", "reward_before", "reward_after",
                                       "advantage_before", "advantage_after", "sign_flip",
                                       "rank_before", "rank_after",
                                       "turns": [{"reward_before", "reward_after", "return_before",
                                                  "return_after", "advantage_before", "advantage_after",
                                                  "sign_flip"}]}]}],          # ``top``; turns: multi-turn only
         "summary": {"candidates", "groups", "sign_flips", "rank_corr"}}

    A turn's ``reward`` is its own total, its ``return`` and ``advantage`` what its tokens were trained with
    (``reward.turns: final``: the trajectory's). A candidate's ``rank_<side>`` is its place in its group by its
    own ``reward_<side>`` (1 = best, ties share their mean rank). Problems are ordered by their mean rank
    correlation (lowest first), then by sign flips. A group of fewer than 2 candidates has no advantage (as in
    training) and is left out.
    """
    after = dataclasses.replace(before, weights=R.weights_dict(weights))
    if before.normalize != "sum" and before.turns == "discounted":  # as the config refuses it for training
        raise ConfigError("reward.normalize", f"{before.normalize} does not combine with reward.turns: discounted")
    by_group: dict[tuple[int, str], list[StoredCandidate]] = defaultdict(list)
    for c in candidates:
        by_group[(c.step, c.problem_id)].append(c)
    groups = [_Group(step, pid, sorted(cs, key=lambda c: c.index))
              for (step, pid), cs in sorted(by_group.items()) if len(cs) >= 2]
    discounted = before.turns == "discounted"
    for g in groups:
        for c in g.candidates:
            if c.turns or discounted:  # each turn's own total (a one-turn candidate: one turn)
                stored = [t.reward for t in c.turns] if c.turns else [c.reward]
                if any(r is None for r in stored):
                    stored = [r if r is not None else x for r, x in zip(stored, turn_totals_under(c, before, before))]
                g.turns_before.append(stored)
                g.turns_after.append(turn_totals_under(c, after, before))
            else:
                g.turns_before.append([])
                g.turns_after.append([])
    if discounted:
        for g in groups:
            _turn_advantages(g, before)
    else:
        for g in groups:
            g.before = [c.reward if c.reward is not None else total_under(c, before) for c in g.candidates]
            g.after = [total_under(c, after) for c in g.candidates]
            g.spans = [range(i, i + 1) for i in range(len(g.candidates))]
        # One tensor per group size (a run has one size; dynamic sampling may leave others).
        by_size: dict[int, list[_Group]] = defaultdict(list)
        for g in groups:
            by_size[len(g.candidates)].append(g)
        for same in by_size.values():
            _advantages(same, before, after)

    for g in groups:
        signs_before = _signs(g.advantage_before, g.zero_variance_before)
        signs_after = _signs(g.advantage_after, g.zero_variance_after)
        g.flipped = [b != a for b, a in zip(signs_before, signs_after)]
        g.rank_corr = rank_correlation(g.seen_before, g.seen_after)

    return {"steps": _per_step(groups), "problems": _per_problem(groups, top),
            "summary": {**_aggregate(groups), "candidates": _count(groups)}}


def _advantages(groups: list[_Group], before: RewardSettings, after: RewardSettings) -> None:
    """One unit per candidate: each group's advantages and zero-variance marks from the trainer's functions
    (``reward.normalize: per_component``: the estimator sees ``group_rewards``, ranks and zero variance the
    totals, as in training)."""
    for side, settings in (("before", before), ("after", after)):
        rewards = torch.tensor([getattr(g, side) for g in groups], dtype=torch.float32)  # (G, K) as the trainer's
        shown = rewards if settings.normalize == "sum" else torch.cat([_normalized(g, settings) for g in groups])
        advantages = clip_advantages(compute_advantages(settings.advantage, shown), settings.clip)  # (G, K)
        zero_var = zero_variance_groups(rewards)  # (G,)
        for g, adv, zv, seen in zip(groups, advantages.tolist(), zero_var.tolist(), rewards.tolist()):
            setattr(g, f"advantage_{side}", adv)
            setattr(g, f"zero_variance_{side}", bool(zv))
            setattr(g, f"seen_{side}", seen)


def _normalized(g: _Group, settings: RewardSettings) -> torch.Tensor:
    """``reward.normalize: per_component``: the group's values as the trainer's estimator saw them under
    ``settings`` (``advantages.group_rewards`` on the stored dimensions, penalties and flags). -> (1, K)"""
    flagged = []
    for c in g.candidates:
        _check_stored(c.rewards, settings, c)
        flags = c.flags + tuple(f for t in c.turns for f in t.flags)
        flagged.append(bool(R.penalized_flags([{"flags": flags}], settings.penalize_flags)))
    return group_rewards(settings.normalize, [c.rewards for c in g.candidates], settings.weights, len(g.candidates),
                         mean=settings.weighted_mean, penalties=[c.overlong_penalty for c in g.candidates],
                         penalized=flagged)  # (1, K)


def _turn_advantages(g: _Group, settings: RewardSettings) -> None:
    """``reward.turns: discounted``: one unit per turn, the advantages from the trainer's
    ``turn_advantages`` on the turns' own totals."""
    for side in ("before", "after"):
        own = getattr(g, f"turns_{side}")  # per candidate, its turns' totals
        setattr(g, side, [x for rewards in own for x in discounted_returns(rewards, settings.turn_discount)])
        per_turn = turn_advantages(settings.advantage, [own], settings.turn_discount, clip=settings.clip)[0]
        setattr(g, f"advantage_{side}", [a for adv in per_turn for a in adv])
        pool = torch.tensor(getattr(g, side), dtype=torch.float32)[None, :]  # (1, M): turn_advantages' pool
        setattr(g, f"zero_variance_{side}", bool(zero_variance_groups(pool)[0]))
        setattr(g, f"seen_{side}", pool[0].tolist())
    starts = [0]
    for turns in g.turns_before:
        starts.append(starts[-1] + len(turns))
    g.spans = [range(a, b) for a, b in zip(starts, starts[1:])]


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


def _candidate_ranks(g: _Group, side: str) -> list[float]:
    """Each candidate's rank in its group by its own ``reward_<side>`` (1 = best; ties share their mean
    rank), on the values the advantages were computed from, as ``rank_correlation`` ranks them."""
    seen = getattr(g, f"seen_{side}")
    ascending = average_ranks([seen[span[0]] for span in g.spans])
    return [len(ascending) + 1 - r for r in ascending]


def _candidate_row(g: _Group, i: int, ranks: tuple[list[float], list[float]]) -> dict:
    c, span = g.candidates[i], g.spans[i]
    first = span[0]
    row = {"step": g.step, "index": c.index, "reward_before": g.before[first], "reward_after": g.after[first],
           "advantage_before": g.advantage_before[first], "advantage_after": g.advantage_after[first],
           "sign_flip": any(g.flipped[u] for u in span), "rank_before": ranks[0][i], "rank_after": ranks[1][i]}
    if c.turns:
        per_turn = len(span) == len(c.turns)  # discounted: a unit per turn; final: the trajectory's for all
        row["turns"] = [
            {"reward_before": rb, "reward_after": ra,
             **{f"{key}_{side}": getattr(g, f"{attr}{side}")[span[t] if per_turn else first]
                for key, attr in (("return", ""), ("advantage", "advantage_")) for side in ("before", "after")},
             "sign_flip": g.flipped[span[t] if per_turn else first]}
            for t, (rb, ra) in enumerate(zip(g.turns_before[i], g.turns_after[i]))]
    return row


def _per_problem(groups: list[_Group], top: int) -> list[dict]:
    problems: dict[str, list[_Group]] = defaultdict(list)
    for g in groups:
        problems[g.problem_id].append(g)
    rows = [{"problem_id": pid, **_aggregate(gs),
             "candidates": [_candidate_row(g, i, ranks) for g in gs
                            for ranks in [(_candidate_ranks(g, "before"), _candidate_ranks(g, "after"))]
                            for i in range(len(g.candidates))]}
            for pid, gs in problems.items()]
    rows.sort(key=lambda r: (r["rank_corr"], -r["sign_flips"], r["problem_id"]))
    return rows[:top]


def _count(groups: list[_Group]) -> int:
    return sum(len(g.candidates) for g in groups)


def _aggregate(groups: list[_Group]) -> dict:
    """Sign flips: the share of the units (advantages) that flip; rank correlation: the mean over groups."""
    units = sum(len(g.flipped) for g in groups)
    return {"sign_flips": sum(sum(g.flipped) for g in groups) / units if units else 0.0,
            "rank_corr": sum(g.rank_corr for g in groups) / len(groups) if groups else 1.0,
            "groups": len(groups)}
