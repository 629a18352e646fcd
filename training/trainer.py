"""The RL loop: sample -> sandbox -> reward -> advantage -> PPO update -> events / eval / checkpoint.

Per step (reads top to bottom in ``Trainer.run_step``: rollout -> advantages -> update):

1. the rollout, from the source the config chose (rollout_sources.py: plain, dynamic sampling, or
   sampled ahead with ``sampling.staleness: 1``), which also sets torch's threads around its phases
   (cores.py): pick ``problems_per_step`` train problems (seeded epochs, a pure function of the step);
   with ``sampling.dynamic`` the step samples in rounds until that many groups are informative
   (dynamic_sampling.py), and the log-prob passes of step 3 run after the last round, on those groups;
2. one batched ``generate`` of ``candidates_per_problem`` completions each, submitted to the sandbox
   as soon as decoded;
3. while the sandbox runs: reference logprobs (adapters disabled) and, when the batch is reused
   (several epochs or minibatches), the old-policy logprobs, with the same forward as the update
   (each distinct prompt once per micro-batch, short completions packed, LoRA fused where exact:
   see policy.py; micro-batches keep a prompt's candidates together);
4. rewards -> group advantages (zero-variance groups counted, optionally dropped) -> clipped;
5. PPO epochs over minibatches (``minibatch_size`` candidates per optimizer step), each split into
   micro-batches for gradient accumulation with global normalisers (the result does not depend on
   ``micro_batch_size``); with one epoch and one minibatch the old logprobs are the detached current
   ones (ratio exactly 1, no extra forward pass);
6. events (``step`` metrics, one ``problem`` event per problem with every candidate), eval and
   checkpoint on their cadence, a progress line on stderr.

Cooperative stop: SIGTERM or the file ``RUN_DIR/STOP`` ends the run at the next phase boundary (a
step whose rollout finished but whose update did not start is dropped), saves a checkpoint of the
last completed step and writes ``done`` with status ``cancelled``. An exception writes ``done``
``failed`` with the message and propagates (the CLI exits non-zero).

Multi-GPU (``accelerate launch``): each process takes every n-th problem of the step, DDP averages
gradients, the main process gathers the problem records and metrics and writes events and
checkpoints. Needs ``problems_per_step >= num_processes``; dynamic sampling runs on one process only.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sandbox.flags import VOCABULARY as FLAG_NAMES
from training import checkpoint as ckpt
from training.advantages import (clip_advantages, compute_advantages, token_advantages, turn_advantages,
                                 zero_variance_groups, zero_variance_turn_groups)
from training.candidates import Rollout
from training.candidates import normalized_rewards
from training.config import RunConfig, config_to_dict
from training.cores import PhaseThreads
from training.divergence import DivergenceMonitor
from training.dynamic_sampling import ZERO_VARIANCE
from training.engines import make_engine
from training.engines.vllm_server import EngineStartCancelled
from training import metrics as metric_registry
from training.events import (EventWriter, Problem, checkpoint_event, done_event, eval_event, problem_event,
                             read_events, start_event, step_event, warning_event, warning_summary)
from training.losses import logprob_mismatch, ppo_loss, tis_weights
from training.policy import (fused_lora, load_policy, lora_sampling, sequence_logprobs, shared_prompt_logprobs,
                             shared_prompts_supported)
from training.rewards import DIMENSIONS
from training.rollout import start_rollout, step_seed
from training.rollout_sources import EngineSync, RolloutSource, StepRollout, make_rollout_source
from training.runtime import describe as describe_runtime
from training.static_decoding import describe as describe_sampling
from training.tracking import make_tracker
from training.turns import turn_metrics

if TYPE_CHECKING:
    from sandbox import BatchRunner


class StopSignal:
    """Set by SIGTERM or by the stop file; polled between phases."""

    def __init__(self, stop_file: Path):
        self.stop_file = stop_file
        self._event = threading.Event()
        self._previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, lambda *_: self._event.set())

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def requested(self) -> bool:
        if not self._event.is_set() and self.stop_file.exists():
            self._event.set()
        return self._event.is_set()


def train(config: RunConfig, out_dir: str | Path, *, resume: bool = False, stop_file: str | Path | None = None,
          runner: BatchRunner | None = None, rollout_chunks: int = 1, progress: bool = True,
          phase_threads: PhaseThreads | None = None) -> str:
    """Run (or, with ``resume``, continue from its last checkpoint) a training run into ``out_dir``.

    Returns the final status, ``succeeded`` or ``cancelled``; an error writes ``done: failed`` and
    re-raises. ``runner`` overrides the ``sandbox.BatchRunner`` built from ``config.sandbox`` (it is not
    closed here). ``rollout_chunks`` splits generation to overlap it with execution (see rollout.py).
    ``phase_threads`` sets torch's CPU threads per phase (``cores.PhaseThreads.for_cpu``); None leaves
    them as they are.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    accelerator = _make_accelerator()
    events = EventWriter(out_dir / "events.jsonl", enabled=accelerator.is_main_process)
    # experiment trackers (training/tracking.py) log what the run writes; on the main process only
    tracker = make_tracker(config, out_dir, events.write) if accelerator.is_main_process else None
    if tracker is not None:
        events.observers.append(tracker.observe)
    stop = StopSignal(Path(stop_file) if stop_file else out_dir / "STOP")
    stop.install()
    trainer = None
    try:
        trainer = Trainer(config, out_dir, accelerator, events, stop, runner=runner,
                          rollout_chunks=rollout_chunks, progress=progress, phase_threads=phase_threads)
        return trainer.run(resume=resume)
    except BaseException as e:
        if trainer is None or not trainer.done_written:
            message = "interrupted" if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {e}"
            events.write(done_event("cancelled" if isinstance(e, KeyboardInterrupt) else "failed", message,
                                    warnings=trainer.warnings if trainer is not None else None))
        raise
    finally:
        if trainer is not None:
            trainer.close()
        if tracker is not None:
            tracker.close()
        stop.uninstall()
        events.close()


class Trainer:
    def __init__(self, config: RunConfig, out_dir: Path, accelerator: Any, events: EventWriter, stop: StopSignal,
                 *, runner: BatchRunner | None = None, rollout_chunks: int = 1, progress: bool = True,
                 phase_threads: PhaseThreads | None = None):
        from sandbox.formats import load_problems

        self.config = config
        self.out_dir = out_dir
        self.accelerator = accelerator
        self.events = events
        self.stop = stop
        self.rollout_chunks = rollout_chunks
        self.progress = progress
        self.threads = phase_threads or PhaseThreads(None, None)
        self.done_written = False
        self.warnings: list[dict] = []
        """The run's divergence warnings so far, as its ``done`` event lists them (``warning_summary``)."""
        self.monitor = DivergenceMonitor(config.monitor)

        loaded = load_problems(config.problems)
        if loaded.errors:
            first = "; ".join(str(e) for e in loaded.errors[:3])
            raise ValueError(f"problems: {config.problems} has {len(loaded.errors)} bad line(s): {first}")
        if config.sampling.engine == "vllm" and accelerator.num_processes > 1:
            raise ValueError(f"sampling.engine: vllm runs on one trainer process, this launch has "
                             f"{accelerator.num_processes}; launch one process (the server can still span GPUs "
                             f"with vllm.tensor_parallel_size) or set sampling.engine: hf")
        if config.sampling.dynamic and accelerator.num_processes > 1:
            raise ValueError(f"sampling.dynamic: true runs on one process, this launch has "
                             f"{accelerator.num_processes}; launch one process or set sampling.dynamic: false")
        in_use = [p for p in loaded.problems if not p.excluded]  # `excluded` (a web app export's): runs skip it
        self.train_problems = [p for p in in_use if p.split == "train"]
        self.heldout_problems = [p for p in in_use if p.split == "heldout"]
        if not self.train_problems:
            raise ValueError(f"problems: {config.problems} has no problem with split 'train' to train on "
                             "(problems marked excluded are skipped)")
        from training.difficulty import filter_train_problems

        # The difficulty filter: the same drop on every start (a resumed run picks from the same list).
        self.train_problems, self.dropped = filter_train_problems(self.train_problems, config.difficulty,
                                                                  str(config.problems))

        _seed_everything(config.train.seed)
        self.policy = load_policy(config.model, device=accelerator.device, kl_coef=config.ppo.kl_coef)
        self.tokenizer = self.policy.tokenizer
        params = self.policy.trainable_parameters()
        self.optimizer = torch.optim.AdamW(params, lr=config.ppo.learning_rate, weight_decay=config.ppo.weight_decay)
        steps, schedule = config.train.steps, config.schedule
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: schedule.lr_factor(s, steps))
        self.start_step = 0
        self.resumed_from: int | None = None
        self.runner = runner
        self._own_runner = runner is None
        self._checkpointed: set[int] = set()
        self.engine: Any = None
        """The generation engine (training/engines/), made in ``run`` once the model is prepared."""
        self.shared_prompts = False
        """Log-prob passes run each distinct prompt once (``shared_prompt_logprobs``); set in ``run``."""
        self.rollouts: RolloutSource | None = None
        """Where each step's rollout comes from (rollout_sources.py), made in ``run`` with the engine."""

    # ------------------------------------------------------------------------------------------ run

    def run(self, resume: bool = False) -> str:
        cfg = self.config
        if resume:
            latest = ckpt.latest_checkpoint(self.out_dir)
            if latest is not None:
                state = ckpt.load_checkpoint(latest, self.policy.model, self.optimizer, self.scheduler)
                self.start_step = self.resumed_from = state.step
                self._checkpointed.add(state.step)
                self._resume_warnings()
        self.model, self.optimizer = self.accelerator.prepare(self.policy.model, self.optimizer)
        self.shared_prompts = shared_prompts_supported(self.model)
        runtime = describe_runtime(self.accelerator.unwrap_model(self.model), dtype=cfg.model.dtype,
                                   device=self.accelerator.device)
        try:
            self.engine = self._make_engine()
        except EngineStartCancelled:
            self._done("cancelled", "cancelled while the generation engine was starting")
            return "cancelled"
        runtime["engine"] = self.engine.describe()
        runtime["sampling"] = {**describe_sampling(self.accelerator.unwrap_model(self.model), cfg.sampling,
                                                   self.accelerator.device), "lora": lora_sampling(self.model)}
        acc = self.accelerator
        # the engine starts from the policy the run starts from
        sync = EngineSync(self.engine, acc.unwrap_model(self.model), self.start_step)
        self.rollouts = make_rollout_source(cfg, self.train_problems, self._start_rollout, threads=self.threads,
                                            sync=sync, stopped=self._stop_requested, rank=acc.process_index,
                                            world=acc.num_processes, zero_variance=self._zero_variance)
        self.events.write(start_event(config_to_dict(cfg), cfg.model.name_or_path, steps=cfg.train.steps,
                                      runtime=runtime, resumed_from=self.resumed_from, dropped=self.dropped))
        if self.runner is None:
            from sandbox.remote import make_runner  # the replicas of sandbox.endpoints, else the local pool

            self.runner = make_runner(endpoints=cfg.sandbox.endpoints, backend=cfg.sandbox.backend,
                                      workers=cfg.sandbox.workers, mode=cfg.sandbox.mode,
                                      timeout_s=cfg.sandbox.timeout_s, memory_mb=cfg.sandbox.memory_mb)

        if self.start_step == 0:
            self.evaluate(0)
        last_done = self.start_step
        steps = cfg.train.steps
        started = time.monotonic()
        for step in range(self.start_step + 1, steps + 1):
            if self._stop_requested():
                return self._cancel(last_done)
            record = self.run_step(step)
            if record is None:  # stop requested mid-step: the half-done step is dropped
                return self._cancel(last_done)
            metrics, problem_events = record
            last_done = step
            self.events.write(step_event(step, metrics))
            for pe in problem_events:
                self.events.write(pe)
            self._watch(step, metrics)
            self._progress(step, steps, started, metrics)
            if step < steps:
                if cfg.train.eval_every and step % cfg.train.eval_every == 0:
                    self.evaluate(step)
                if cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0:
                    self.save(step)
        self.evaluate(steps)
        self.save(steps)
        if cfg.train.save_merged and self.policy.is_lora:
            self.save_merged(steps)
        self._done("succeeded")
        return "succeeded"

    def run_step(self, step: int) -> tuple[dict, list[Problem]] | None:
        """One RL step: rollout -> advantages -> update. -> (metrics, problem events); None when a stop
        was requested before the update (the half-done step is dropped)."""
        acc = self.accelerator
        t_step = time.monotonic()
        # rollout: sampled, executed, scored (and the forward passes that need no reward, meanwhile)
        drawn = self.rollouts.draw(step, lambda batch: self._forward_passes(batch, step))
        if drawn is None:
            return None

        t_up = time.monotonic()
        lr = self.optimizer.param_groups[0]["lr"]
        rollout, passes = drawn.rollout, drawn.passes
        if rollout is None:  # no informative group in max_rounds rounds: nothing to learn from this step
            update = _no_update()
        else:
            tensors, ref_logprobs, old_logprobs, kl_coef, _ = passes
            advantages, keep = self._advantages(rollout, tensors)  # advantages
            with self.rollouts.update_threads():  # update
                update = self._update(tensors, advantages.to(acc.device), keep.to(acc.device),
                                      old_logprobs, ref_logprobs, kl_coef, step)
            update.update(self.rollouts.after_update(step))
        with warnings.catch_warnings():
            # a step whose groups were all dropped made no optimizer step; the schedule still advances
            warnings.filterwarnings("ignore", message=r".*lr_scheduler.step\(\)` before `optimizer.step\(\)`.*")
            self.scheduler.step()
        logprob_s = passes[4] if passes is not None else 0.0
        update_s = time.monotonic() - t_up + logprob_s
        metrics, problem_events = self._report(step, drawn, update, lr=lr, update_s=update_s, logprob_s=logprob_s,
                                               step_s=time.monotonic() - t_step)
        if acc.num_processes > 1:
            metrics, problem_events = _gather(acc, metrics, problem_events)
        return metrics, problem_events

    def _advantages(self, rollout: Rollout, tensors: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Per group, clipped; zero-variance groups counted (and maybe dropped), as are cut-off answers
        with ``reward.overlong.mode: mask``. -> advantages (N,) or per token (N, C), keep (N,) bool"""
        cfg = self.config
        if cfg.sampling.turns > 1 and cfg.reward.turns == "discounted":  # per turn: one value per token
            advantages = _discounted_advantages(cfg, rollout, tensors["token_turns"])  # (N, C)
        else:
            # per_component: each reward dimension normalized within its group first (GDPO)
            rewards = rollout.rewards if cfg.reward.normalize == "sum" else normalized_rewards(rollout, cfg.reward)
            advantages = compute_advantages(cfg.ppo.advantage, rewards)  # (P, K)
            advantages = clip_advantages(advantages, cfg.reward.clip).flatten()  # (N,)
        zero_var = self._zero_variance(rollout)  # (P,)
        keep = (~zero_var if cfg.ppo.drop_zero_variance_groups else torch.ones_like(zero_var))
        keep = keep.repeat_interleave(cfg.sampling.candidates_per_problem)  # (N,)
        if cfg.reward.overlong.mode == "mask":  # a cut-off answer says nothing about the policy's ending
            keep = keep & ~torch.tensor(rollout.batch.truncated, dtype=torch.bool)
        return advantages, keep

    def _report(self, step: int, drawn: StepRollout, update: dict, *, lr: float, update_s: float, logprob_s: float,
                step_s: float) -> tuple[dict, list[Problem]]:
        """The step's metrics and problem events, over every sampled group (all rounds): what the policy did."""
        cfg = self.config
        sampled = drawn.sampled
        zero_var = self._zero_variance(sampled)  # (P_sampled,)
        if cfg.reward.normalize != "sum" and sampled is not drawn.rollout:  # dynamic sampling: events come from copies
            normalized_rewards(sampled, cfg.reward)
        metrics = _rollout_metrics(sampled, zero_var)
        if cfg.sampling.turns > 1:
            metrics.update(turn_metrics(sampled.candidates, cfg.sampling.turns))
        metrics.update(update)
        metrics.update({
            "lr": lr, "kl_coef": cfg.ppo.kl_coef * cfg.schedule.kl_factor(step - 1),
            "tokens_per_s": sampled.generated_tokens / max(sampled.time_generate_s, 1e-9),
            "time/rollout_s": sampled.time_generate_s, "time/sandbox_s": sampled.time_sandbox_s,
            "time/update_s": update_s, "time/logprob_s": logprob_s, "time/step_s": step_s,
        })
        metrics.update(drawn.metrics)
        fates = drawn.fates
        if fates is None and cfg.ppo.drop_zero_variance_groups:
            fates = [{"used": not z, "set_aside": ZERO_VARIANCE if z else None} for z in zero_var.tolist()]
        return metrics, _problem_events(step, sampled, zero_var, fates)

    def _start_rollout(self, problems: list, generator_seed: int):
        cfg = self.config
        return start_rollout(
            self.engine, self.tokenizer, problems, cfg.sampling,
            self.runner, generator_seed=generator_seed, repeats=cfg.reward.repeats,
            chunks=self.rollout_chunks, weights=cfg.reward.weights.as_dict(), normalize=cfg.reward.weighted_mean,
            timeout_s=cfg.sandbox.timeout_s, overlong=cfg.reward.overlong, penalize_flags=cfg.reward.penalize_flags,
            feedback=cfg.feedback)

    def _zero_variance(self, rollout: Rollout) -> torch.Tensor:
        """Groups with no learning signal. -> (P,) bool. With discounted per-turn credit a group is judged
        by its turns' returns (``zero_variance_turn_groups``), else by its candidates' rewards."""
        cfg = self.config
        if cfg.sampling.turns > 1 and cfg.reward.turns == "discounted":
            k = cfg.sampling.candidates_per_problem
            groups = [[c.turn_rewards for c in rollout.candidates[g * k:(g + 1) * k]]
                      for g in range(len(rollout.problems))]
            return zero_variance_turn_groups(groups, cfg.reward.turn_discount)
        return zero_variance_groups(rollout.rewards)

    def _forward_passes(self, batch, step: int) -> tuple[dict, torch.Tensor | None, torch.Tensor | None, float, float]:
        """The passes that do not depend on rewards: reference log-probs (when there is a KL term) and,
        when the batch is reused, old-policy ones. -> tensors, ref (N, C) | None, old (N, C) | None,
        kl_coef, seconds"""
        cfg, acc = self.config, self.accelerator
        t_lp = time.monotonic()
        tensors = batch.padded(self.tokenizer.pad_token_id, device=acc.device)
        kl_coef = cfg.ppo.kl_coef * cfg.schedule.kl_factor(step - 1)
        ref_logprobs = self._logprobs(tensors, reference=True) if cfg.ppo.kl_coef > 0 else None
        n = len(batch)
        reuse = cfg.ppo.epochs_per_batch > 1 or (cfg.ppo.minibatch_size or n) < n
        old_logprobs = self._logprobs(tensors) if reuse else None
        return tensors, ref_logprobs, old_logprobs, kl_coef, time.monotonic() - t_lp

    # --------------------------------------------------------------------------------------- update

    @torch.no_grad()
    def _logprobs(self, tensors: dict, reference: bool = False) -> torch.Tensor:
        """Log-probs of every completion token under the current (or reference) policy. -> (N, C)"""
        cfg = self.config
        mb = cfg.ppo.micro_batch_size
        ctx = self.policy.reference(self.model) if reference else contextlib.nullcontext(self.model)
        n, c = tensors["completion_mask"].shape
        out = torch.zeros(n, c, device=tensors["input_ids"].device)  # (N, C)
        micro = _micro_batches(tensors, torch.arange(n, device=out.device), mb, self.shared_prompts)
        with ctx as model, fused_lora(model):
            for idx in micro:
                logp, _, _, width = self._micro_logprobs(model, tensors, idx)
                out[idx, :width] = logp
        return out

    def _micro_logprobs(self, model: torch.nn.Module, tensors: dict, idx: torch.Tensor, with_entropy: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, int]:
        """Log-probs (and entropy) of the rows ``idx``, each distinct prompt run once when the model
        allows it (``shared_prompt_logprobs``), else one full sequence per row.
        -> logprobs (b, C'), entropy (b, C') or None, completion_mask (b, C'), C'"""
        temperature = _temperature(self.config)
        if self.shared_prompts:
            prompt_ids, prompt_mask, group, comp_ids, cmask, width = _shared_micro_batch(tensors, idx)
            logp, entropy = shared_prompt_logprobs(model, prompt_ids, prompt_mask, group, comp_ids, cmask,
                                                   temperature=temperature, with_entropy=with_entropy)
        else:
            ids, mask, cmask, width = _micro_batch(tensors, idx)
            logp, entropy = sequence_logprobs(model, ids, mask, width, temperature=temperature,
                                              with_entropy=with_entropy)
        return logp, entropy, cmask, width

    def _update(self, tensors: dict, advantages: torch.Tensor, keep: torch.Tensor,
                old_logprobs: torch.Tensor | None, ref_logprobs: torch.Tensor | None, kl_coef: float,
                step: int) -> dict[str, float]:
        """PPO epochs over minibatches with gradient accumulation; returns the mean update metrics."""
        cfg, acc = self.config.ppo, self.accelerator
        index = keep.nonzero().flatten()  # (N_kept,)
        n = index.numel()
        if n == 0:  # every group was zero-variance and dropped: nothing to learn from this step
            return _no_update()
        mb_size = min(cfg.minibatch_size or n, n)
        gen = torch.Generator().manual_seed(step_seed(self.config.train.seed, step, acc.process_index))
        params = [p for p in self.model.parameters() if p.requires_grad]
        mismatch = _Mismatch()
        with fused_lora(self.model):
            sums, updates, ent_sum, ent_tokens = self._epochs(
                tensors, advantages, index, old_logprobs, ref_logprobs, kl_coef, mb_size, gen, params, mismatch)
        out = {key: value / updates for key, value in sums.items()}
        out["entropy"] = ent_sum / max(ent_tokens, 1.0)
        out.update(mismatch.metrics())
        return out

    def _epochs(self, tensors: dict, advantages: torch.Tensor, index: torch.Tensor,
                old_logprobs: torch.Tensor | None, ref_logprobs: torch.Tensor | None, kl_coef: float, mb_size: int,
                gen: torch.Generator, params: list, mismatch: "_Mismatch") -> tuple[dict[str, float], int, float, float]:
        """The optimizer steps of ``_update``: PPO epochs x minibatches x micro-batches. In the first
        epoch every row is seen once: its old-policy log-probs are compared with the sampler's.
        ``advantages`` is (N,) per sequence, or (N, C) per token (``reward.turns: discounted``); a
        multi-turn batch's ``loss_mask`` keeps the feedback tokens out of the loss, KL, entropy and
        mismatch (they still condition the model's later tokens)."""
        cfg, acc = self.config.ppo, self.accelerator
        n = index.numel()
        sums: dict[str, float] = defaultdict(float)
        updates = 0
        ent_sum, ent_tokens = 0.0, 0.0
        loss_mask = tensors.get("loss_mask")  # (N, C) or None
        completion_mask = tensors["completion_mask"] if loss_mask is None else loss_mask
        sampler_logprobs = tensors.get("sampler_logprobs")  # (N, C) or None
        for epoch in range(cfg.epochs_per_batch):
            order = index[torch.randperm(n, generator=gen).to(index.device)] if mb_size < n else index
            for start in range(0, n, mb_size):
                mb = order[start:start + mb_size]  # (M,)
                num_tokens = completion_mask[mb].sum().clamp(min=1).float()
                micro = _micro_batches(tensors, mb, cfg.micro_batch_size, self.shared_prompts)
                for j, idx in enumerate(micro):
                    sync = acc.no_sync(self.model) if j < len(micro) - 1 else contextlib.nullcontext()
                    with sync:
                        logp, entropy, cmask, width = self._micro_logprobs(
                            self.model, tensors, idx, with_entropy=epoch == 0)  # (b, C')
                        if loss_mask is not None:
                            cmask = loss_mask[idx, :width]  # (b, C') the model's own tokens
                        adv = advantages[idx] if advantages.dim() == 1 else advantages[idx, :width]
                        old = logp.detach() if old_logprobs is None else old_logprobs[idx, :width]
                        ref = None if ref_logprobs is None else ref_logprobs[idx, :width]
                        sampled = None if sampler_logprobs is None else sampler_logprobs[idx, :width]
                        if sampled is not None and epoch == 0:
                            mismatch.add(*logprob_mismatch(old, sampled, cmask))
                        weights = (tis_weights(old, sampled, cfg.tis_cap)
                                   if cfg.tis_cap is not None and sampled is not None else None)
                        loss, metrics = ppo_loss(
                            logp, old, adv, cmask, ref_logprobs=ref, clip_range=cfg.clip_range,
                            clip_range_high=cfg.clip_range_high, dual_clip=cfg.dual_clip, kl_coef=kl_coef,
                            kl_estimator=cfg.kl_estimator, aggregation=cfg.loss_aggregation,
                            num_tokens=num_tokens, num_seqs=mb.numel(), token_weights=weights)
                        acc.backward(loss)
                    for key, value in metrics.items():
                        sums[key] += value.item()
                    if entropy is not None:
                        ent_sum += (entropy * cmask).sum().item()
                        ent_tokens += cmask.sum().item()
                grad_norm = acc.clip_grad_norm_(params, cfg.max_grad_norm or math.inf)
                sums["grad_norm"] += float(grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                updates += 1
        return sums, updates, ent_sum, ent_tokens

    # ---------------------------------------------------------------------------- eval / checkpoint

    def evaluate(self, step: int) -> None:
        if not self.heldout_problems:
            return
        from training.evaluation import evaluate

        self.rollouts.settle(step)  # the evaluation samples the policy after this step, alone
        if self.accelerator.is_main_process:
            n = self.config.train.eval_samples
            # record: each problem's samples ride in per_problem as a step's candidates do in its
            # problem events, so the web app can show what a held-out problem's samples did.
            report = evaluate(self.engine, self.tokenizer, self.heldout_problems, self.config.sampling, samples=n,
                              ks=list(range(1, n + 1)), runner=self.runner, record=True,
                              reward=self.config.reward, timeout_s=self.config.sandbox.timeout_s,
                              feedback=self.config.feedback)
            extra = {"per_problem": report.get("per_problem"), "pass_at_1_turn1": report.get("pass@1/turn1")}
            self.events.write(eval_event(step, "heldout", report["pass@1"], report.get("pass@k", {}), **extra))
        self.accelerator.wait_for_everyone()

    def save(self, step: int) -> None:
        if self.rollouts is not None:  # the tokenizer is saved too: not while a rollout in flight tokenizes
            self.rollouts.wait()
        path, kind = ckpt.save_checkpoint(
            self.out_dir, step, self.model, self.tokenizer, self.optimizer, self.scheduler,
            config_to_dict(self.config), is_lora=self.policy.is_lora, accelerator=self.accelerator)
        self._checkpointed.add(step)
        self.events.write(checkpoint_event(step, path.relative_to(self.out_dir).as_posix(), kind))

    def save_merged(self, step: int) -> None:
        """Merge the adapter into the base weights (in place: the run is over) and write them."""
        if self.accelerator.is_main_process:
            merged = ckpt.merge_lora(self.accelerator.unwrap_model(self.model))
            out = ckpt.save_merged(merged, self.tokenizer, self.out_dir / ckpt.CHECKPOINTS_DIR / ckpt.MERGED_DIR)
            self.events.write(checkpoint_event(step, out.relative_to(self.out_dir).as_posix(), "merged"))
        self.accelerator.wait_for_everyone()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        if self.rollouts is not None:  # after the engine: a rollout still sampling ends with it
            self.rollouts.close()
        if self._own_runner and self.runner is not None:
            self.runner.close()

    # -------------------------------------------------------------------------------------- helpers

    def _cancel(self, last_done: int) -> str:
        self.rollouts.drop()
        if last_done not in self._checkpointed:
            self.save(last_done)
        else:  # the checkpoint exists already (resume point or cadence): point at it again
            self.events.write(checkpoint_event(last_done, ckpt.checkpoint_dir(self.out_dir, last_done)
                                               .relative_to(self.out_dir).as_posix(),
                                               "adapter" if self.policy.is_lora else "full"))
        self._done("cancelled")
        return "cancelled"

    def _done(self, status: str, error: str | None = None) -> None:
        self.events.write(done_event(status, error, warnings=self.warnings))
        self.done_written = True

    def _watch(self, step: int, metrics: dict) -> None:
        """Divergence warnings (training/divergence.py): each condition the step crossed, once per run."""
        for w in self.monitor.observe(step, metrics):
            event = warning_event(w.source, w.message, w.step, condition=w.condition, metric=w.metric, value=w.value,
                                  bound=w.bound, since_step=w.since_step)
            self.events.write(event)
            self.warnings.append(warning_summary(event))
            if self.accelerator.is_main_process:
                print(f"warning: {w.message}", file=sys.stderr, flush=True)

    def _resume_warnings(self) -> None:
        """A resumed run keeps the warnings it wrote before: they stay in its done event and do not repeat."""
        path = self.out_dir / "events.jsonl"
        earlier = [e for e in read_events(path) if e.get("event") == "warning" and e.get("condition")] \
            if path.exists() else []
        self.warnings = [warning_summary(e) for e in earlier]
        self.monitor = DivergenceMonitor(self.config.monitor, already=[e.get("condition") for e in earlier])

    def _stop_requested(self) -> bool:
        flag = self.stop.requested()
        if self.accelerator.num_processes > 1:
            t = torch.tensor([1.0 if flag else 0.0], device=self.accelerator.device)
            flag = bool(self.accelerator.reduce(t, reduction="sum").item() > 0)
        return flag

    def _make_engine(self) -> Any:
        cfg = self.config
        max_prompt = None
        if cfg.sampling.engine == "vllm" and cfg.vllm.url is None and cfg.vllm.max_model_len is None:
            from training.turns import engine_prompt_tokens  # later turns: earlier replies and feedback too

            max_prompt = engine_prompt_tokens(self.tokenizer, self.train_problems + self.heldout_problems,
                                              cfg.sampling, cfg.feedback)
        log = (lambda line: print(line, file=sys.stderr, flush=True)) if self.accelerator.is_main_process else None
        return make_engine(cfg, self.accelerator.unwrap_model(self.model), self.tokenizer, run_dir=self.out_dir,
                           chunks=self.rollout_chunks, stop=self.stop.requested, log=log, max_prompt_tokens=max_prompt)

    def _progress(self, step: int, steps: int, started: float, metrics: dict) -> None:
        if not (self.progress and self.accelerator.is_main_process):
            return
        done = step - self.start_step
        per_step = (time.monotonic() - started) / max(done, 1)
        eta = per_step * (steps - step)
        print(f"step {step}/{steps} | {per_step:.1f} s/step | ETA {_duration(eta)} | "
              f"reward {metrics.get('reward/mean', 0.0):.3f} | pass {metrics.get('pass@1/train', 0.0):.3f} | "
              f"kl {metrics.get('kl', 0.0):.4f}", file=sys.stderr, flush=True)


class _Mismatch:
    """Running sampler/trainer log-prob mismatch of one step (``logprob_mismatch`` per micro-batch)."""

    def __init__(self) -> None:
        self.max_diff, self.k3_sum, self.tokens = 0.0, 0.0, 0.0

    def add(self, max_diff: float, k3_sum: float, tokens: float) -> None:
        self.max_diff = max(self.max_diff, max_diff)
        self.k3_sum += k3_sum
        self.tokens += tokens

    def metrics(self) -> dict[str, float]:
        return {"rollout/logprob_diff_max": self.max_diff,
                "rollout/mismatch_kl": self.k3_sum / max(self.tokens, 1.0)}


def _micro_batch(tensors: dict, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Rows ``idx`` with the padding columns they all share removed (left of the prompts, right of the
    completions): less compute, same result. -> input_ids (b, L'), attention_mask (b, L'),
    completion_mask (b, C'), C'"""
    ids = tensors["input_ids"][idx]  # (b, P + C)
    mask = tensors["attention_mask"][idx]  # (b, P + C)
    cmask = tensors["completion_mask"][idx]  # (b, C)
    p = int(tensors["prompt_length"])
    width = max(1, int(cmask.sum(-1).max().item()))
    first = int((mask[:, :p].sum(0) > 0).nonzero().min().item()) if p else 0
    end = p + width
    return ids[:, first:end], mask[:, first:end], cmask[:, :width], width


def _micro_batches(tensors: dict, rows: torch.Tensor, size: int, shared_prompts: bool) -> list[torch.Tensor]:
    """``rows`` split into micro-batches of at most ``size``, ordered to compute little padding.

    Each micro-batch is trimmed to its longest completion (and longest prompt). With
    ``shared_prompts`` the rows stay with the other candidates of their prompt (groups sorted by their
    longest completion): each prompt then runs once per micro-batch and its short completions are
    packed into shared rows (``shared_prompt_logprobs``). Otherwise the cheaper of that order and
    rows sorted by completion length (estimated token positions) wins. Which rows share a micro-batch
    never changes a minibatch's result (global normalisers). rows: (n,) -> [(b,), ...]
    """
    if rows.numel() <= size:
        return [rows]
    lengths = tensors["completion_mask"][rows].sum(-1)  # (n,)
    prompt_lengths = tensors["attention_mask"][rows, :int(tensors["prompt_length"])].sum(-1)  # (n,)
    groups = tensors["prompt_index"][rows]  # (n,)
    group_max = torch.zeros(int(groups.max()) + 1, dtype=lengths.dtype, device=lengths.device).scatter_reduce(
        0, groups, lengths, reduce="amax")  # (G,)
    by_group = torch.argsort(group_max[groups] * (groups.numel() + 1) + groups, stable=True)  # (n,)
    if shared_prompts:
        return [rows[by_group[i:i + size]] for i in range(0, rows.numel(), size)]
    by_length = torch.sort(lengths, stable=True).indices  # (n,)

    def split(order: torch.Tensor) -> tuple[int, list[torch.Tensor]]:
        cost, out = 0, []
        for start in range(0, order.numel(), size):
            part = order[start:start + size]
            b, width, p = part.numel(), int(lengths[part].max()), int(prompt_lengths[part].max())
            cost += b * (p + width)
            out.append(rows[part])
        return cost, out

    return min(split(by_group), split(by_length), key=lambda c: c[0])[1]


def _shared_micro_batch(tensors: dict, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                    torch.Tensor, torch.Tensor, int]:
    """Rows ``idx`` split for ``shared_prompt_logprobs``: their distinct prompts once each (left padding
    they all share removed), the prompt row of every sequence, and the completions trimmed to the
    longest. -> prompt_ids (G, P'), prompt_mask (G, P'), group_index (b,), completion_ids (b, C'),
    completion_mask (b, C'), C'"""
    p = int(tensors["prompt_length"])
    cmask = tensors["completion_mask"][idx]  # (b, C)
    width = max(1, int(cmask.sum(-1).max().item()))
    _, group = torch.unique(tensors["prompt_index"][idx], return_inverse=True)  # (b,) in [0, G)
    g = int(group.max().item()) + 1
    rows = torch.arange(idx.numel(), device=idx.device)  # (b,)
    first = torch.full((g,), idx.numel(), dtype=torch.long, device=idx.device).scatter_reduce(
        0, group, rows, reduce="amin")  # (G,) first row of each prompt
    prompt_ids = tensors["input_ids"][idx[first], :p]  # (G, P)
    prompt_mask = tensors["attention_mask"][idx[first], :p]  # (G, P)
    start = int((prompt_mask.sum(0) > 0).nonzero().min().item()) if p else 0
    completion_ids = tensors["input_ids"][idx, p:p + width]  # (b, C')
    return prompt_ids[:, start:], prompt_mask[:, start:], group, completion_ids, cmask[:, :width], width


def _discounted_advantages(cfg: RunConfig, rollout: Rollout, token_turns: torch.Tensor) -> torch.Tensor:
    """``reward.turns: discounted``: each token's advantage from its turn's return, over the group's
    pool of turn returns (``turn_advantages``), clipped as ``reward.clip`` says. -> (N, C)"""
    k = cfg.sampling.candidates_per_problem
    cands = rollout.candidates
    groups = [[c.turn_rewards for c in cands[g * k:(g + 1) * k]] for g in range(len(rollout.problems))]
    per_turn = [adv for group in turn_advantages(cfg.ppo.advantage, groups, cfg.reward.turn_discount,
                                                 clip=cfg.reward.clip) for adv in group]
    return token_advantages(per_turn, token_turns.cpu())  # (N, C)


def _no_update() -> dict[str, float]:
    """The update metrics of a step that made no optimizer step (no group to learn from)."""
    return {"loss/policy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "entropy": 0.0, "approx_kl": 0.0,
            "rollout/logprob_diff_max": 0.0, "rollout/mismatch_kl": 0.0}


def _rollout_metrics(rollout: Rollout, zero_var: torch.Tensor) -> dict[str, float]:
    cands = rollout.candidates
    n = max(len(cands), 1)
    metrics = {"reward/mean": sum(c.reward for c in cands) / n}
    for dim in DIMENSIONS:
        if cands and dim in cands[0].rewards:
            metrics[f"reward/{dim}"] = sum(c.rewards[dim] for c in cands) / n
    metrics["pass@1/train"] = sum(c.passed for c in cands) / n
    metrics["zero_variance_groups"] = int(zero_var.sum().item())
    lengths = [len(ids) for ids in rollout.batch.completion_ids]
    metrics["completion_len/mean"] = sum(lengths) / max(len(lengths), 1)
    metrics["completion_len/max"] = max(lengths, default=0)
    metrics["rollout/truncated_frac"] = sum(c.truncated for c in cands) / n
    for flag in FLAG_NAMES:  # every name every step: a curve at 0 says "looked, found none"
        metrics[f"flags/{flag}"] = sum(flag in c.flags for c in cands)
    metrics["candidates"] = len(cands)
    return metrics


def _problem_events(step: int, rollout: Rollout, zero_var: torch.Tensor,
                    fates: list[dict] | None = None) -> list[Problem]:
    """One ``problem`` event per group; ``fates``: per group, whether the update used it (``used``,
    ``set_aside``, and with dynamic sampling ``round``), when groups can be left out."""
    out = []
    for g, problem in enumerate(rollout.problems):
        group = [c for c in rollout.candidates if c.group == g]
        n = max(len(group), 1)
        # multi-turn: the share passing at their first turn too
        turn1 = sum(c.passed_first_turn for c in group) / n if any(c.turns is not None for c in group) else None
        out.append(problem_event(step, problem.id, sum(c.passed for c in group) / n, [c.event_dict() for c in group],
                                 zero_variance=bool(zero_var[g]), solve_rate_turn1=turn1, **(fates[g] if fates else {})))
    return out


def _gather(acc: Any, metrics: dict, problem_events: list[Problem]) -> tuple[dict, list[Problem]]:
    """The step's metrics and problem events of every process, on every process: each metric combined
    as training/metrics.py says (``metric_registry.combine``)."""
    from accelerate.utils import gather_object

    all_metrics = gather_object([metrics])
    all_events = gather_object(problem_events)
    return metric_registry.combine(all_metrics), all_events


def _make_accelerator() -> Any:
    from accelerate import Accelerator

    # The model is loaded in its configured dtype (bfloat16 on GPU), so no autocast on top; LoRA
    # weights stay float32 (peft upcasts adapters), which is what mixed-precision training needs.
    return Accelerator(cpu=not torch.cuda.is_available(), mixed_precision="no")


def _temperature(cfg: RunConfig) -> float:
    t = cfg.sampling.temperature
    return t if t > 0 else 1.0


def _seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
