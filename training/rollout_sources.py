"""Where a step's rollout comes from: the first phase of ``Trainer.run_step`` (rollout -> advantages -> update).

Three sources, chosen by the config (``make_rollout_source``):

- ``PlainRollouts``: the step's problems sampled now, executed by the sandbox while the trainer runs
  the forward passes that do not depend on rewards;
- ``DynamicRollouts`` (``sampling.dynamic``): rounds until enough groups are informative
  (dynamic_sampling.py), the forward passes after the last round, on the groups kept;
- ``RolloutsAhead`` (``sampling.staleness: 1``): step k + 1 is sampled and executed in a background
  thread while step k updates, by the policy before that update; the engine gets the new policy when
  step k + 1 starts.

Each source owns what its rollouts need beside the trainer: the torch thread count around its phases
(cores.py), the engine's policy version (``EngineSync``), and for ``RolloutsAhead`` the background
thread and the rollout in flight, which evaluations, checkpoints and the run's end wait for
(``settle``, ``wait``, ``drop``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any

import torch

from training.candidates import Rollout
from training.config import RunConfig
from training.cores import PhaseThreads
from training.dynamic_sampling import sample_informative
from training.rollout import pick_problems, step_seed

ROUND_SEED = 15_485_863
"""Generator-seed offset between dynamic-sampling rounds (a prime far above any chunk offset)."""

Start = Callable[[list, int], Any]
"""Sample ``problems`` with a generator seed and submit their executions -> a pending rollout (``finish()``)."""
Forward = Callable[[Any], Any]
"""The trainer's forward passes that do not depend on rewards, on a rollout's ``GenerationBatch``."""


@dataclass
class StepRollout:
    """What a source hands the update of one step."""

    sampled: Rollout
    """Every group sampled this step (every round): the step's metrics and problem events."""
    rollout: Rollout | None
    """The groups the update learns from (None: dynamic sampling found no informative group)."""
    passes: Any
    """``forward(rollout.batch)`` (None without a rollout)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The source's own step metrics (``rollout/staleness``, ``time/wait_s``, ``sampling/*``...)."""
    fates: list[dict] | None = None
    """Per sampled group, what became of it (``round``, ``used``, ``set_aside``); None: the trainer's."""


class EngineSync:
    """Which step's policy the generation engine samples, and handing it a newer one (hf samples the
    trainer's model in place: nothing to hand)."""

    def __init__(self, engine: Any, model: torch.nn.Module, step: int):
        self.engine, self.model = engine, model
        self.step = step
        """The step whose policy the engine samples (its weights were synced after that step's update)."""

    def __call__(self, step: int) -> float | None:
        """Make the engine sample the policy as it is after ``step``'s update.
        -> seconds spent, None when nothing was synced"""
        if self.engine.name == "hf" or self.step >= step:
            self.step = max(self.step, step)
            return None
        t0 = time.monotonic()
        self.engine.sync(self.model)
        self.step = step
        return time.monotonic() - t0


class RolloutSource:
    """What every source offers the trainer (module docstring)."""

    def __init__(self, config: RunConfig, problems: Sequence[Any], start: Start, *, threads: PhaseThreads,
                 sync: EngineSync, stopped: Callable[[], bool], rank: int = 0, world: int = 1):
        self.config, self.start, self.threads, self.sync = config, start, threads, sync
        self.problems = list(problems)
        """The run's train problems (``pick_problems`` indexes them)."""
        self.stopped = stopped
        """Whether a stop was requested (polled at the phase boundaries)."""
        self.rank, self.world = rank, world
        """This process's share of a step's problems (``PlainRollouts``): every ``world``-th from ``rank``."""

    def draw(self, step: int, forward: Forward) -> StepRollout | None:
        """Step ``step``'s rollout, sampled, executed and scored, and ``forward`` of its batch.
        None when a stop was requested (the half-done step is dropped)."""
        raise NotImplementedError

    def update_threads(self) -> contextlib.AbstractContextManager:
        """Around the update: the sandbox is done, so every core the machine leaves free."""
        return self.threads.idle()

    def after_update(self, step: int) -> dict[str, float]:
        """The next step samples the updated policy. -> metrics (``time/sync_s`` when the engine synced)"""
        sync_s = self.sync(step)
        return {} if sync_s is None else {"time/sync_s": sync_s}

    def settle(self, step: int) -> None:
        """Before an evaluation samples: nothing of a rollout in flight, and the engine samples the
        policy after ``step``."""
        self.wait()
        self.sync(step)

    def wait(self) -> None:
        """Until no rollout is in flight (it may tokenize: the tokenizer is about to be saved)."""

    def drop(self) -> None:
        """The run ends: end a rollout in flight (its requests with the engine)."""

    def close(self) -> None:
        """After the engine is closed: the source's threads end."""


class PlainRollouts(RolloutSource):
    """The step's problems sampled now (this process's share of them)."""

    def draw(self, step: int, forward: Forward) -> StepRollout | None:
        cfg = self.config
        picked = pick_problems(len(self.problems), cfg.sampling.problems_per_step, step, cfg.train.seed)
        problems = [self.problems[i] for i in picked][self.rank::self.world]
        with self.threads.idle():  # nothing is executing yet: generation gets every core
            pending = self.start(problems, step_seed(cfg.train.seed, step, self.rank))
        # While the sandbox runs: the forward passes that do not depend on rewards (on the cores the
        # sandbox workers leave free).
        self.threads.busy()
        passes = forward(pending.batch)
        rollout = pending.finish()
        if self.stopped():
            return None
        return StepRollout(sampled=rollout, rollout=rollout, passes=passes)


class DynamicRollouts(RolloutSource):
    """``sampling.dynamic``: rounds until the batch is informative (dynamic_sampling.py)."""

    def __init__(self, *args: Any, zero_variance: Callable[[Rollout], torch.Tensor], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.zero_variance = zero_variance

    def draw(self, step: int, forward: Forward) -> StepRollout | None:
        cfg = self.config
        picked = pick_problems(len(self.problems), cfg.sampling.problems_per_step, step, cfg.train.seed)
        drawn = sample_informative(
            picked, per_step=cfg.sampling.problems_per_step, max_rounds=cfg.sampling.max_rounds,
            num_problems=len(self.problems), seed=cfg.train.seed, step=step,
            roll=lambda indices, round_: self._roll(indices, step, round_), zero_variance=self.zero_variance)
        if drawn is None:
            return None
        rollout = drawn.kept()
        with self.threads.idle():  # the sandbox is done: these passes get every core
            passes = forward(rollout.batch) if rollout is not None else None
        fates = [{"round": ref.round, "used": ref.set_aside is None, "set_aside": ref.set_aside}
                 for ref in drawn.groups]
        return StepRollout(sampled=drawn.sampled(), rollout=rollout, passes=passes, metrics=drawn.metrics(),
                           fates=fates)

    def _roll(self, indices: list[int], step: int, round_: int) -> Rollout | None:
        """One round: roll out and score ``indices``; None when a stop was requested."""
        seed = step_seed(self.config.train.seed, step, 0) + ROUND_SEED * (round_ - 1)
        with self.threads.idle():
            pending = self.start([self.problems[i] for i in indices], seed)
        self.threads.busy()
        rollout = pending.finish()
        return None if self.stopped() else rollout


class RolloutsAhead(RolloutSource):
    """``sampling.staleness: 1`` (vLLM, one process): each step's rollout is sampled while the step
    before updates. Its passes and update run beside the next step's rollout, on the cores its engine
    and sandbox leave; a phase that starts after that rollout is done takes every free core."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._ahead: Future | None = None
        """The next step's rollout -> (Rollout, the step whose policy sampled it)."""
        self._ahead_step = 0
        self._pool: ThreadPoolExecutor | None = None

    def draw(self, step: int, forward: Forward) -> StepRollout | None:
        """Step ``step``'s rollout (sampled in the background while step - 1 updated, by the policy
        before that update), then the engine gets step - 1's policy and step + 1's rollout starts."""
        t0 = time.monotonic()
        if self._ahead is None:  # the run's (or the resumed run's) first step: nothing was sampled ahead
            self._submit(step)
        assert self._ahead_step == step, (self._ahead_step, step)
        rollout, sampled_at = self._ahead.result()
        self._ahead = None
        wait_s = time.monotonic() - t0
        if self.stopped():
            return None
        sync_s = self.sync(step - 1)
        if step < self.config.train.steps:
            self._submit(step + 1)
        with self.threads.beside(self._alone):  # the engine and the sandbox work on the next step meanwhile
            passes = forward(rollout.batch)
        metrics = {"rollout/staleness": float(step - 1 - sampled_at), "time/wait_s": wait_s}
        if sync_s is not None:
            metrics["time/sync_s"] = sync_s
        return StepRollout(sampled=rollout, rollout=rollout, passes=passes, metrics=metrics)

    def update_threads(self) -> contextlib.AbstractContextManager:
        return self.threads.beside(self._alone)

    def after_update(self, step: int) -> dict[str, float]:
        return {}  # the engine gets this policy when the next step starts (``draw``)

    def wait(self) -> None:
        if self._ahead is not None:
            futures_wait([self._ahead])  # its result (or error) is taken by the next step

    def drop(self) -> None:
        if self._ahead is None:
            return
        if not self._ahead.done():
            self.sync.engine.close()  # the run is ending: in-flight requests fail now instead of finishing
        futures_wait([self._ahead])
        self._ahead = None

    def close(self) -> None:
        if self._pool is not None:  # after the engine: a rollout still sampling ends with it
            self._pool.shutdown(wait=True)

    def _alone(self) -> bool:
        """No rollout sampled ahead is running (done, or none: the run's last step)."""
        return self._ahead is None or self._ahead.done()

    def _submit(self, step: int) -> None:
        cfg = self.config
        picked = pick_problems(len(self.problems), cfg.sampling.problems_per_step, step, cfg.train.seed)
        problems = [self.problems[i] for i in picked]
        seed = step_seed(cfg.train.seed, step, 0)
        sampled_at = self.sync.step

        def roll() -> tuple[Rollout, int]:
            return self.start(problems, seed).finish(), sampled_at

        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rollout-ahead")
        self._ahead = self._pool.submit(roll)
        self._ahead_step = step


def make_rollout_source(config: RunConfig, *args: Any, zero_variance: Callable[[Rollout], torch.Tensor],
                        **kwargs: Any) -> RolloutSource:
    """The source ``config.sampling`` asks for (arguments: ``RolloutSource``'s)."""
    if config.sampling.dynamic:
        return DynamicRollouts(config, *args, zero_variance=zero_variance, **kwargs)
    if config.sampling.staleness:
        return RolloutsAhead(config, *args, **kwargs)
    return PlainRollouts(config, *args, **kwargs)

