"""Divergence warnings: a step's metrics against the ``monitor`` section's bounds (docs/design.md
"Divergence warnings").

A run can go wrong and still end ``succeeded``: its KL to the reference explodes, its loss blows up, or
its reward sits flat at the floor (no candidate passes, every step alike) so the update learns nothing.
``DivergenceMonitor.observe(step, metrics)`` is fed each finished step's metrics (``training/metrics.py``
keys) and returns the warnings that step raised; each condition warns once per run. The run itself goes
on: a warning tells the user, it decides nothing. Pure: no torch, no files; the trainer writes what it
returns as ``warning`` events and lists them again in its ``done`` event.

Conditions (``CONDITIONS``):

- ``kl``: the step's ``kl`` (nats per token to the reference) above ``monitor.kl_max``, or not finite;
- ``loss``: the step's total loss, ``|loss/policy + loss/kl|``, above ``monitor.loss_max``, or not finite;
- ``flat_reward``: ``monitor.flat_reward_steps`` steps in a row in which no candidate passed every test
  (``pass@1/train`` 0) and ``reward/mean`` stayed within ``monitor.flat_reward_tol`` (max - min).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CONDITIONS = ("kl", "loss", "flat_reward")
SOURCES = {"kl": "monitor.kl_max", "loss": "monitor.loss_max", "flat_reward": "monitor.flat_reward_steps"}
"""The ``source`` of each condition's ``warning`` event: the bound's config name."""


@dataclass(frozen=True)
class Divergence:
    """One condition crossed: what (``metric``, its ``value``), which ``bound``, at which ``step``; for
    ``flat_reward`` also ``since_step``, the first step of the flat stretch."""

    condition: str
    step: int
    metric: str
    value: float | None
    """The value that crossed the bound (None: it was not a finite number)."""
    bound: float
    message: str
    since_step: int | None = None

    @property
    def source(self) -> str:
        """The bound's config name (the ``warning`` event's ``source``)."""
        return SOURCES[self.condition]


class DivergenceMonitor:
    """Feeds on each step's metrics; see the module docstring. ``monitor``: a ``MonitorConfig`` (or any
    object with its fields); ``already``: conditions that warned before (a resumed run's earlier
    ``warning`` events), which stay quiet."""

    def __init__(self, monitor: Any, already: Iterable[str] = ()):
        self.cfg = monitor
        self.warned: set[str] = set(already)
        n = monitor.flat_reward_steps or 0
        self._recent: deque[tuple[int, float | None, float | None]] = deque(maxlen=max(n, 1))

    def observe(self, step: int, metrics: Mapping[str, Any]) -> list[Divergence]:
        """The warnings step ``step`` raises (at most one per condition per run)."""
        found = [w for w in (self._kl(step, metrics), self._loss(step, metrics), self._flat(step, metrics))
                 if w is not None and w.condition not in self.warned]
        self.warned.update(w.condition for w in found)
        return found

    def _kl(self, step: int, metrics: Mapping[str, Any]) -> Divergence | None:
        bound = self.cfg.kl_max
        if bound is None or "kl" not in metrics:
            return None
        value = _number(metrics["kl"])
        if value is not None and value <= bound:
            return None
        what = f"{value:.4g} nats/token" if value is not None else "not a finite number"
        return Divergence("kl", step, "kl", value, bound,
                        f"KL to the reference model at step {step} is {what}, past monitor.kl_max {bound:g}: the "
                        f"policy has moved far from the model it started as (raise ppo.kl_coef, lower "
                        f"ppo.learning_rate)")

    def _loss(self, step: int, metrics: Mapping[str, Any]) -> Divergence | None:
        bound = self.cfg.loss_max
        if bound is None or "loss/policy" not in metrics:
            return None
        parts = [_number(metrics.get(k, 0.0)) for k in ("loss/policy", "loss/kl")]
        value = None if None in parts else abs(sum(parts))
        if value is not None and value <= bound:
            return None
        what = f"{value:.4g}" if value is not None else "not a finite number"
        return Divergence("loss", step, "loss/policy + loss/kl", value, bound,
                        f"the loss at step {step} is {what} (|loss/policy + loss/kl|), past monitor.loss_max "
                        f"{bound:g}: the update is diverging (lower ppo.learning_rate, set ppo.max_grad_norm)")

    def _flat(self, step: int, metrics: Mapping[str, Any]) -> Divergence | None:
        n = self.cfg.flat_reward_steps
        if not n:
            return None
        self._recent.append((step, _number(metrics.get("reward/mean")), _number(metrics.get("pass@1/train"))))
        if len(self._recent) < n:
            return None
        rewards = [r for _, r, _ in self._recent]
        if any(r is None for r in rewards) or any(p != 0.0 for _, _, p in self._recent):
            return None
        spread = max(rewards) - min(rewards)
        if spread > self.cfg.flat_reward_tol:
            return None
        first = self._recent[0][0]
        level = sum(rewards) / len(rewards)
        return Divergence("flat_reward", step, "reward/mean", level, float(n),
                        f"reward flat at {level:.3f} (within {spread:.3g}) with no candidate passing every test for "
                        f"{n} steps (steps {first}–{step}, monitor.flat_reward_steps {n}): the groups carry no "
                        f"signal and the run learns nothing. The model cannot solve these problems as prompted "
                        f"(a chat prompt or a repair turn needs a model that follows chat and feedback)",
                        since_step=first)


def _number(value: Any) -> float | None:
    """A finite float, else None (the step event writes a non-finite metric as null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if hasattr(value, "item"):  # a tensor or numpy scalar
            return _number(value.item())
        return None
    return float(value) if math.isfinite(value) else None
