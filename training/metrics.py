"""The registry of step metrics: every key a ``step`` event's ``metrics`` may hold, defined once.

Each ``Metric`` says what the number is (``doc``), how people read it (``label`` on its own, ``legend``
inside its chart), its ``unit``, how the values of several trainer processes combine into the step's
value (``combine``: ``mean`` is weighted by each process's candidates; ``sum``, ``max``, ``min``) and
which run-page ``charts`` draw it. The trainer's ``_gather`` combines through ``combine``, the step
event's constructor (``events.step_event``) refuses a key that is not here, and the web app sends
``registry_json()`` to the run and compare pages, which take their labels and chart layout from it.

A key is exact (``kl``) or a family whose last part is a placeholder (``flags/<flag>``,
``reward/turn<t>``): ``find("flags/broad_except")`` finds the family, and ``{name}`` in its label is
what the placeholder matched. Keys are a contract (docs/design.md "Training run events"): add, never
rename.

Also here, because the trainer and the web app must agree on it: ``ZERO_VARIANCE_ATOL``, the spread of
a group's rewards under which the group counts as zero-variance (no learning signal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

ZERO_VARIANCE_ATOL = 1e-8
"""A group is zero-variance when max(reward) - min(reward) <= this (its advantages are all ~0)."""

Combine = Literal["mean", "sum", "max", "min"]
COMBINES = ("mean", "sum", "max", "min")
WEIGHT_KEY = "candidates"
"""The metric whose per-process values weight ``mean`` (a process's share of the step's candidates)."""


@dataclass(frozen=True)
class Chart:
    """A run-page chart: ``chart-<name>``; ``scale`` is how its y axis reads (``share``: 0-100 %,
    ``percent``: % from 0, ``unit``: 0-1, ``zero``: from 0, ``count``: whole numbers from 0, ``log``,
    ``linear``); ``total`` is drawn first and thicker."""

    name: str
    title: str
    axis: str
    """The y axis's title."""
    scale: Literal["share", "percent", "unit", "zero", "count", "log", "linear"] = "linear"
    total: str | None = None


@dataclass(frozen=True)
class Metric:
    key: str
    """The key in ``metrics``; a family ends with ``<placeholder>`` (letters, digits, ``_``)."""
    label: str
    """How a page names it on its own (``{name}``: a family's placeholder)."""
    unit: str
    """``share`` (0..1), ``reward``, ``nats``, ``s``, ``tokens``, ``tokens/s``, ``count``, ``steps``,
    ``ratio``, ``lr``."""
    combine: Combine
    """How the step's value is made from each trainer process's value."""
    doc: str
    """What the number is."""
    charts: tuple[str, ...] = ()
    """The run-page charts that draw it (``Chart.name``)."""
    legend: str = ""
    """Its name inside its chart(s); empty: ``label``."""

    def __post_init__(self) -> None:
        if self.combine not in COMBINES:
            raise ValueError(f"metric {self.key}: combine {self.combine!r}; valid: {', '.join(COMBINES)}")

    @property
    def family(self) -> bool:
        return self.key.endswith(">")

    def label_of(self, key: str) -> str:
        return self.label.format(name=_placeholder_value(self, key))


CHARTS: tuple[Chart, ...] = (
    Chart("reward", "Reward: total and each dimension", "mean reward", total="reward/mean"),
    Chart("pass", "Pass rate (train rollouts, held-out eval)", "pass rate", scale="share"),
    Chart("repair", "Repair: first turn vs after every turn", "share / mean reward", scale="unit"),
    Chart("kl", "KL to the reference model", "KL (nats/token)", scale="zero"),
    Chart("loss", "Loss: policy and KL terms", "loss"),
    Chart("clip", "Clip fraction", "tokens clipped", scale="percent"),
    Chart("entropy", "Policy entropy", "nats/token"),
    Chart("tokens", "Generation throughput", "tokens/s", scale="zero"),
    # phases may overlap (docs/design.md "Training run events"): lines, not a stack
    Chart("time", "Time per step, by phase", "seconds", scale="zero", total="time/step_s"),
    Chart("mismatch", "Sampler vs trainer log-probs (same weights)", "nats (log scale)", scale="log"),
    Chart("truncated", "Truncated replies (hit max_new_tokens)", "share of candidates", scale="share"),
    Chart("length", "Completion length", "tokens", scale="zero"),
    Chart("groups", "Groups per step: sampled, used, zero-variance", "groups per step", scale="count",
          total="sampling/groups_kept"),
)

_M = Metric
METRICS: tuple[Metric, ...] = (
    # -- rewards and pass rates (training/trainer.py _rollout_metrics, training/turns.py) --
    _M("reward/mean", "reward: total (weighted)", "reward", "mean",
       "mean weighted total reward of the step's candidates, before advantage normalisation", ("reward",),
       legend="total (weighted)"),
    _M("reward/pass_rate", "reward: tests passed (train)", "share", "mean",
       "mean over the step's candidates of the fraction of a candidate's tests that passed (the pass_rate "
       "reward dimension)", ("reward", "pass"), legend="train: tests passed"),
    _M("reward/syntax", "reward: syntax", "reward", "mean", "mean syntax reward (the code compiles)", ("reward",),
       legend="syntax"),
    _M("reward/efficiency", "reward: efficiency", "reward", "mean",
       "mean efficiency reward (runtime within a share of the time limit)", ("reward",), legend="efficiency"),
    _M("reward/conciseness", "reward: conciseness", "reward", "mean", "mean conciseness reward", ("reward",),
       legend="conciseness"),
    _M("reward/format", "reward: format", "reward", "mean", "mean format reward (required I/O form)", ("reward",),
       legend="format"),
    _M("pass@1/train", "train pass@1 (all tests pass)", "share", "mean",
       "fraction of the step's candidates that passed every test", ("pass",), legend="train: all tests pass"),
    _M("pass@1/turn1", "train: pass at turn 1", "share", "mean",
       "multi-turn: fraction of the step's trajectories passing every test at their first turn", ("repair",)),
    _M("pass@1/final", "train: pass by the last turn", "share", "mean",
       "multi-turn: fraction of the step's trajectories passing every test by their last turn", ("repair",)),
    _M("repair/rate", "repaired (of those failing turn 1)", "share", "mean",
       "multi-turn: of the trajectories failing at turn 1, the share passing by their last turn (0 when none "
       "failed)", ("repair",)),
    _M("turns/mean", "turns per trajectory: mean", "count", "mean", "multi-turn: mean number of turns taken"),
    _M("reward/turn<t>", "reward of turn {name}", "reward", "mean",
       "multi-turn: mean reward of the turn-t attempts over the trajectories that reached turn t (absent when "
       "none did)", ("repair",)),
    # -- the update (training/losses.py ppo_loss, training/trainer.py _update) --
    _M("loss/policy", "loss: policy", "ratio", "mean", "clipped surrogate loss, aggregated as "
       "ppo.loss_aggregation says", ("loss",), legend="policy loss"),
    _M("loss/kl", "loss: KL penalty", "ratio", "mean", "the KL term as added to the loss (times kl_coef)",
       ("loss",), legend="kl loss"),
    _M("kl", "KL to the reference model", "nats", "mean",
       "mean per-token estimate of KL(policy || reference) with ppo.kl_estimator", ("kl",), legend="KL"),
    _M("approx_kl", "approximate KL: old to new policy", "nats", "mean",
       "k3 estimate of KL(old policy || new policy) per token: a step-size diagnostic"),
    _M("clip_frac", "clip fraction", "share", "mean", "fraction of tokens whose ratio was clipped", ("clip",)),
    _M("entropy", "policy entropy", "nats", "mean", "mean per-token entropy of the policy (first epoch)",
       ("entropy",), legend="entropy"),
    _M("grad_norm", "gradient norm", "ratio", "mean", "gradient norm before clipping, mean over optimizer steps"),
    _M("lr", "learning rate", "lr", "max", "the learning rate of the step"),
    _M("kl_coef", "KL coefficient", "ratio", "max", "the KL coefficient of the step (after its schedule)"),
    # -- the rollout --
    _M("candidates", "candidates per step", "count", "sum", "candidates sampled in the step (all rounds)"),
    _M("zero_variance_groups", "zero-variance groups", "count", "sum",
       "groups whose candidates' rewards were all within ZERO_VARIANCE_ATOL (no learning signal)", ("groups",),
       legend="zero variance (no signal)"),
    _M("completion_len/mean", "completion length: mean", "tokens", "mean", "mean completion length in tokens",
       ("length",), legend="mean"),
    _M("completion_len/max", "completion length: longest", "tokens", "max", "longest completion in tokens",
       ("length",), legend="longest"),
    _M("rollout/truncated_frac", "truncated replies (hit max_new_tokens)", "share", "mean",
       "fraction of candidates cut off at sampling.max_new_tokens", ("truncated",), legend="truncated"),
    _M("rollout/mismatch_kl", "sampler vs trainer: mismatch KL", "nats", "mean",
       "k3 estimate of KL(sampler || trainer) per token on the sampled tokens, same weights", ("mismatch",),
       legend="mismatch KL (mean per token)"),
    _M("rollout/logprob_diff_max", "sampler vs trainer: largest |log-prob difference|", "nats", "max",
       "largest |sampler - trainer| log-prob of a sampled token, same weights", ("mismatch",)),
    _M("rollout/staleness", "sampler's policy: updates behind the trainer's", "steps", "max",
       "sampling.staleness 1: optimizer steps between the sampling and the trained policy"),
    _M("flags/<flag>", "flagged: {name}", "count", "sum",
       "candidates carrying the flag (sandbox.flags vocabulary; every flag every step)"),
    _M("tokens_per_s", "generated tokens/s", "tokens/s", "sum",
       "generated completion tokens per second of rollout time (summed over processes)", ("tokens",)),
    # -- dynamic sampling (training/dynamic_sampling.py) --
    _M("sampling/groups_sampled", "sampling: groups sampled", "count", "sum",
       "sampling.dynamic: groups sampled in every round of the step", ("groups",), legend="sampled (every round)"),
    _M("sampling/groups_kept", "sampling: groups kept", "count", "sum",
       "sampling.dynamic: groups the update used", ("groups",), legend="used by the update"),
    _M("sampling/rounds", "sampling: rounds", "count", "max", "sampling.dynamic: rounds the step sampled",
       ("groups",), legend="sampling rounds"),
    # -- time: wall-clock seconds of each phase (phases may overlap) --
    _M("time/rollout_s", "time: rollout (s)", "s", "max", "generation", ("time",), legend="rollout"),
    _M("time/sandbox_s", "time: sandbox (s)", "s", "max", "execution in the sandbox", ("time",), legend="sandbox"),
    _M("time/update_s", "time: update (s)", "s", "max", "log-prob passes and the PPO update", ("time",),
       legend="update"),
    _M("time/logprob_s", "time: log-prob passes (s)", "s", "max", "reference and old-policy log-prob passes",
       ("time",), legend="logprob"),
    _M("time/step_s", "time: whole step (s)", "s", "max", "the whole step", ("time",), legend="whole step"),
    _M("time/sync_s", "time: engine sync (s)", "s", "max",
       "vllm: handing the policy to the server (its adapter or its weights, vllm.sync)", ("time",), legend="sync"),
    _M("time/wait_s", "time: waiting for the rollout sampled ahead (s)", "s", "max",
       "sampling.staleness 1: the step's wait for its rollout", ("time",), legend="wait"),
)

_EXACT: dict[str, Metric] = {m.key: m for m in METRICS if not m.family}
_FAMILIES: tuple[tuple[re.Pattern, Metric], ...] = tuple(
    (re.compile(re.escape(m.key[:m.key.index("<")]) + r"([A-Za-z0-9_]+)$"), m) for m in METRICS if m.family)


def _check_registry() -> None:
    keys = [m.key for m in METRICS]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"metrics registered twice: {duplicates}")
    charts = {c.name for c in CHARTS}
    for m in METRICS:
        missing = set(m.charts) - charts
        if missing:
            raise ValueError(f"metric {m.key} names unknown charts {sorted(missing)}; charts: {sorted(charts)}")


_check_registry()


def find(key: str) -> Metric | None:
    """The registered metric of ``key`` (its family for ``flags/<flag>``-like keys); None when unknown."""
    metric = _EXACT.get(key)
    if metric is not None:
        return metric
    for pattern, family in _FAMILIES:
        if pattern.match(key):
            return family
    return None


def unknown_keys(keys: Iterable[str]) -> list[str]:
    return sorted(k for k in keys if find(k) is None)


def check_keys(keys: Iterable[str]) -> None:
    """Raise when a key is not registered (how the trainer keeps ``METRICS`` complete)."""
    unknown = unknown_keys(keys)
    if unknown:
        raise ValueError(f"step metrics not in the registry: {', '.join(unknown)}; define each once in "
                         f"training/metrics.py METRICS (label, unit, combine, charts)")


def combine(per_process: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One step's metrics from each trainer process's: each key combined as its ``Metric.combine`` says,
    ``mean`` weighted by the processes' ``candidates`` (a process missing a key counts 0 for it).
    Keys are those of the first process (the main one); an unregistered key raises."""
    if not per_process:
        return {}
    keys = list(per_process[0])
    check_keys(keys)
    weights = [m.get(WEIGHT_KEY, 1) for m in per_process]
    total = sum(weights) or 1
    out: dict[str, float] = {}
    for key in keys:
        values = [m.get(key, 0.0) for m in per_process]
        rule = find(key).combine
        if rule == "sum":
            out[key] = sum(values)
        elif rule == "max":
            out[key] = max(values)
        elif rule == "min":
            out[key] = min(values)
        else:
            out[key] = sum(v * w for v, w in zip(values, weights)) / total
    return out


def registry_json() -> dict:
    """The registry as plain data for the web pages: ``{"metrics": [...], "charts": [...]}`` (families
    keep their ``<placeholder>`` key; ``legend`` filled in from ``label`` where empty)."""
    metrics = []
    for m in METRICS:
        entry = asdict(m)
        entry["charts"] = list(m.charts)
        entry["legend"] = m.legend or m.label
        if m.family:
            entry["prefix"] = m.key[:m.key.index("<")]
        metrics.append(entry)
    return {"metrics": metrics, "charts": [asdict(c) for c in CHARTS]}


def _placeholder_value(metric: Metric, key: str) -> str:
    if not metric.family:
        return ""
    return key[metric.key.index("<"):]
