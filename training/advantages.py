"""Advantage estimators: compare each candidate with the other candidates of the same problem.

Every estimator takes the combined rewards of a step grouped per problem, shape ``(P, K)`` (P problems,
K candidates each), and returns advantages of the same shape. All of them subtract a per-group
baseline, so a group's advantages sum to zero and a group whose candidates all got the same reward
("zero variance") gives no learning signal; ``zero_variance_groups`` finds those so the trainer can
count them per problem and, with dynamic sampling, drop them from the update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from training.metrics import ZERO_VARIANCE_ATOL

AdvantageFn = Callable[..., torch.Tensor]


def grpo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: ``A_i = (r_i - mean(r)) / (std(r) + eps)`` within each group.

    ``std`` is the unbiased sample standard deviation (as in TRL's GRPOTrainer). Source: Shao et al.
    2024, DeepSeekMath, eq. 3 (outcome supervision).

    rewards: (P, K) -> advantages: (P, K). Needs K >= 2.
    """
    _check_groups(rewards)
    std = rewards.std(dim=1, keepdim=True)  # (P, 1); 0 for a zero-variance group, hence eps
    return _centered(rewards) / (std + eps)  # (P, K)


def dr_grpo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO: ``A_i = r_i - mean(r)``, no division by the group std (which biases towards easy and
    hard problems). Source: Liu et al. 2025, "Understanding R1-Zero-Like Training".

    rewards: (P, K) -> advantages: (P, K).
    """
    _check_groups(rewards)
    return _centered(rewards)  # (P, K)


def rloo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RLOO: ``A_i = r_i - mean_{j != i} r_j = K / (K - 1) * (r_i - mean(r))``, the leave-one-out
    baseline (unbiased: the baseline does not depend on the candidate's own sample). Source: Ahmadian
    et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization".

    rewards: (P, K) -> advantages: (P, K). Needs K >= 2.
    """
    _check_groups(rewards)
    k = rewards.shape[1]
    return _centered(rewards) * (k / (k - 1))  # (P, K): r_i - (sum - r_i) / (K - 1), rearranged


def _centered(rewards: torch.Tensor) -> torch.Tensor:
    """``r_i - mean(r)`` per group, exactly 0 in a group whose rewards are all equal: the float mean of
    equal values can miss them by an ulp, and GRPO's division by ``std + eps`` (std 0) would turn that
    into advantages of several hundredths for candidates that did exactly as well as each other.

    rewards: (P, K) -> (P, K)
    """
    same = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)  # (P, 1)
    centered = rewards - rewards.mean(dim=1, keepdim=True)  # (P, K)
    return centered.masked_fill(same, 0.0)


ADVANTAGES: dict[str, AdvantageFn] = {"grpo": grpo, "rloo": rloo, "dr_grpo": dr_grpo}


def get_advantage(name: str) -> AdvantageFn:
    """The estimator registered as ``name``; an unknown name raises listing the valid ones."""
    try:
        return ADVANTAGES[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; valid estimators: {', '.join(sorted(ADVANTAGES))}"
        ) from None


def compute_advantages(name: str, rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Advantages of grouped rewards with the estimator ``name``. rewards: (P, K) -> (P, K)."""
    return get_advantage(name)(rewards, eps=eps)


def weighted_sum(components: torch.Tensor, weights: torch.Tensor, mean: bool = True,
                 eps: float = 1e-6) -> torch.Tensor:
    """``reward.normalize: sum``: ``R_i = sum_d w_d r_id / sum_d w_d`` (``mean``; else without the division),
    each candidate on its own, as ``rewards.combine`` scores it; the group plays no part.

    components: (P, K, D), weights: (D,) -> (P, K).
    """
    combined = (components * weights).sum(dim=-1)  # (P, K)
    return combined / weights.sum() if mean else combined


def per_component(components: torch.Tensor, weights: torch.Tensor, mean: bool = True,
                  eps: float = 1e-6) -> torch.Tensor:
    """``reward.normalize: per_component`` (GDPO): each dimension normalized within its group, then
    weighted and combined::

        z_id = (r_id - mean_k r_kd) / (std_k r_kd + eps)      # per group, per dimension d
        R_i  = sum_d w_d z_id / sum_d w_d                     # (mean; else without the division)

    ``std`` is the unbiased sample std, as ``grpo`` takes it. A dimension whose values are all equal
    within a group contributes exactly 0 there, so a dimension of tiny spread (conciseness) counts
    as much as one of wide spread (pass rate) once it varies at all: the weights, not the spreads,
    decide how much each dimension moves the ranking inside a group. Scaling a dimension by a positive
    constant leaves ``R`` unchanged (up to ``eps``), and every dimension's ``z`` sums to 0 over a group.
    Source: NVIDIA 2026, "GDPO: Group reward-Decoupled Normalization Policy Optimization" (NeMo-RL's
    GDPO), which then normalizes ``R`` over the batch; here the configured advantage estimator takes ``R``.

    components: (P, K, D), weights: (D,) -> (P, K). Needs K >= 2.
    """
    p, k, d = components.shape
    _check_groups(components[..., 0])
    per_dim = components.permute(0, 2, 1).reshape(p * d, k)  # (P*D, K): one row per group and dimension
    std = per_dim.std(dim=1, keepdim=True)  # (P*D, 1)
    # a zero-variance row is exactly 0 once centered; dividing it by 1 keeps it 0 for any eps, even eps = 0
    scale = torch.where(std > 0, std + eps, torch.ones_like(std))  # (P*D, 1)
    z = (_centered(per_dim) / scale).reshape(p, d, k).permute(0, 2, 1)  # (P, K, D)
    return weighted_sum(z, weights, mean)  # (P, K)


REWARD_NORMALIZATIONS: dict[str, Callable[..., torch.Tensor]] = {"sum": weighted_sum, "per_component": per_component}


def get_normalization(name: str) -> Callable[..., torch.Tensor]:
    """The ``reward.normalize`` mode registered as ``name``; an unknown name raises listing the valid ones."""
    try:
        return REWARD_NORMALIZATIONS[name]
    except KeyError:
        raise ValueError(f"unknown reward normalization {name!r}; valid modes: "
                         f"{', '.join(sorted(REWARD_NORMALIZATIONS))}") from None


def group_rewards(name: str, rewards: Sequence[Mapping[str, float]], weights: Mapping[str, float],
                  group_size: int, *, mean: bool = True, penalties: Sequence[float] | None = None,
                  penalized: Sequence[bool] | None = None, eps: float = 1e-6) -> torch.Tensor:
    """The values the advantage estimator sees, from each candidate's per-dimension ``rewards`` (group-major,
    ``group_size`` per group), combined by the ``reward.normalize`` mode ``name`` (``get_normalization``).

    As a candidate's total (``rewards.total_reward``): a candidate with a penalized flag (``penalized``) counts
    with every dimension 0 and no overlong penalty; the others add their ``penalties`` (``reward.overlong``
    soft) unnormalized after the combination. In ``sum`` mode that is each candidate's own total again; in
    ``per_component`` mode the flagged candidate sits below its group in every dimension it had any credit in.
    Only dimensions with a positive weight are read. The trainer and the what-if re-scoring (training/rescore.py)
    both call this. -> (P, K) float32
    """
    fn = get_normalization(name)
    dims = [d for d, w in weights.items() if w]
    n = len(rewards)
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} candidates do not split into groups of {group_size}")
    kept = torch.tensor([not x for x in penalized] if penalized is not None else [True] * n)  # (N,)
    values = torch.tensor([[float(r[d]) for d in dims] for r in rewards], dtype=torch.float32)  # (N, D)
    values = values * kept[:, None]  # (N, D)
    offsets = torch.tensor(list(penalties) if penalties is not None else [0.0] * n, dtype=torch.float32)  # (N,)
    offsets = offsets * kept  # (N,)
    w = torch.tensor([float(weights[d]) for d in dims], dtype=torch.float32)  # (D,)
    combined = fn(values.reshape(n // group_size, group_size, len(dims)), w, mean=mean, eps=eps)  # (P, K)
    return combined + offsets.reshape(n // group_size, group_size)  # (P, K)


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """Per turn of a trajectory, ``G_t = sum_{s >= t} gamma^(s - t) r_s`` (computed backwards). A first
    turn that passes (a one-turn trajectory) keeps its own reward; a fix is worth less to the turn
    before it the smaller ``gamma`` is. Source: Baronio et al. 2025, Kevin-32B (multi-turn RL)."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def turn_advantages(name: str, groups: Sequence[Sequence[Sequence[float]]], gamma: float,
                    eps: float = 1e-6, clip: float | None = None) -> list[list[list[float]]]:
    """``reward.turns: discounted``: advantages per turn of each trajectory.

    ``groups[g][i]`` are the turn rewards of trajectory ``i`` of problem ``g``. Each turn's return
    (``discounted_returns``) joins its group's pool (every turn of every trajectory of the problem),
    and the estimator ``name`` runs over that pool as one group (GRPO: mean/std of the pool; RLOO:
    leave-one-out within it; Dr. GRPO: pool mean), so a turn is compared with the group's other
    attempts; then ``clip_advantages`` (``reward.clip``). -> ``[g][i][t]``, the same nesting as ``groups``.
    The trainer and the what-if re-scoring (training/rescore.py) both call this.
    """
    out = []
    for group in groups:
        returns = [discounted_returns(turns, gamma) for turns in group]
        pool = torch.tensor([r for rs in returns for r in rs], dtype=torch.float32)[None, :]  # (1, M)
        flat = clip_advantages(compute_advantages(name, pool, eps=eps), clip)[0].tolist()  # (M,)
        split, pos = [], 0
        for rs in returns:
            split.append(flat[pos:pos + len(rs)])
            pos += len(rs)
        out.append(split)
    return out


def zero_variance_turn_groups(groups: Sequence[Sequence[Sequence[float]]], gamma: float,
                               atol: float = ZERO_VARIANCE_ATOL) -> torch.Tensor:
    """``reward.turns: discounted``: groups with no signal, i.e. whose pool of turn returns (as
    ``turn_advantages`` pools them) is one value, so every turn's advantage is zero. Judging by the final
    rewards instead would set aside a group where every trajectory ends up passing, some at once and
    some after a repair: the difference discounted credit exists to teach. -> (P,) bool"""
    out = []
    for group in groups:
        pool = [r for turns in group for r in discounted_returns(turns, gamma)]
        out.append(bool(pool) and max(pool) - min(pool) <= atol)
    return torch.tensor(out, dtype=torch.bool)


def token_advantages(per_turn: Sequence[Sequence[float]], token_turns: torch.Tensor) -> torch.Tensor:
    """Each completion token's advantage: its turn's entry of ``per_turn`` (one list per sequence), 0 on
    feedback tokens and padding (``token_turns`` -1). token_turns: (N, C) -> (N, C)"""
    n, c = token_turns.shape
    width = max(1, max((len(a) for a in per_turn), default=1))
    table = torch.zeros(n, width, dtype=torch.float32, device=token_turns.device)  # (N, T)
    for i, adv in enumerate(per_turn):
        if adv:
            table[i, :len(adv)] = torch.tensor(adv, dtype=torch.float32)
    picked = table.gather(1, token_turns.clamp(min=0))  # (N, C)
    return picked * (token_turns >= 0).to(picked.dtype)  # (N, C)


def clip_advantages(advantages: torch.Tensor, clip: float | None) -> torch.Tensor:
    """``reward.clip``: advantages clamped to ``[-clip, clip]`` after the group baseline; None leaves them.

    advantages: (P, K) -> (P, K).
    """
    return advantages if clip is None else advantages.clamp(-clip, clip)  # (P, K)


def zero_variance_groups(rewards: torch.Tensor, atol: float = ZERO_VARIANCE_ATOL) -> torch.Tensor:
    """Groups whose candidates all got the same reward (no signal). rewards: (P, K) -> mask: (P,) bool."""
    _check_groups(rewards)
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) <= atol  # (P,)


def _check_groups(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be grouped as (problems, candidates); got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(
            "group advantages need at least 2 candidates per problem; "
            f"got {rewards.shape[1]} (raise sampling.candidates_per_problem)"
        )
