"""Run configuration: one frozen dataclass per concern, one source of truth.

The YAML keys are the dataclass field names (a contract shared with the web form, the API and saved
runs; see docs/design.md "Run config (training/)"). Each field has a one-line docstring under it: ``field_docs()``
reads them with ``ast`` so the JSON Schema (``json_schema()``), the web form and the CLI all show the
same help text. Numeric bounds and choices live in the field's metadata and drive both validation
and the schema, so they cannot drift apart.

Usage::

    cfg = load_config("run.yaml", overrides=["ppo.learning_rate=1e-5"])
    cfg.ppo.clip_range          # 0.2
    config_to_dict(cfg)         # plain JSON/YAML-safe dict, round-trips through config_from_dict

Bad input raises ``ConfigError`` whose ``field`` is the dotted path (``ppo.clip_range``) and whose
message says how to fix it.

This module is *what* a run config is: sections, fields, bounds, cross-field rules. *How* a section is
declared, coerced from YAML/JSON and turned into a JSON Schema is ``training/config_schema.py``
(``setting``, ``Section``, ``from_dict``, ``section_schema``), which knows nothing of runs.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass
from pathlib import Path

from sandbox.flags import VOCABULARY as FLAG_VOCABULARY
from training.config_schema import (ConfigError, Section, from_dict, module_field_docs, section_schema, setting,
                                    to_dict)
# The readers of config text, re-exported: callers import them from here with the rest of the config.
from training.config_schema import LostNumber, json_number, lost_number_message, yaml_load  # noqa: F401
from training.config_schema import leaf_fields as _leaf_fields

# The names of the registries in training/advantages.py (ADVANTAGES) and training/losses.py
# (KL_ESTIMATORS), repeated here so that validating a config imports no torch; a test holds them equal.
ADVANTAGE_ESTIMATORS = ("grpo", "rloo", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean")
"""The modes of ``training.losses.aggregate`` (which reads them from here)."""
PROMPT_STYLES = ("completion", "chat")
DTYPES = ("float32", "bfloat16", "float16", "auto")
WARMUPS = ("none", "stable_then_fast")
LR_DECAYS = ("constant", "linear", "cosine")
SANDBOX_MODES = ("warm", "cold")
OVERLONG_MODES = ("none", "mask", "soft")
REWARD_NORMALIZATIONS = ("sum", "per_component")
"""reward.normalize: the modes of ``training.advantages.REWARD_NORMALIZATIONS`` (a test holds them equal)."""
TURN_CREDITS = ("final", "discounted")
"""reward.turns: how a multi-turn trajectory's turn rewards become the credit of its tokens."""
MAX_TURNS = 8
ENGINES = ("hf", "vllm")
COMPILE_MODES = ("auto", "on", "off")
"""Generation engines (training/engines/): the trainer's own decoding loop, or a vLLM server."""
VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")
VLLM_SYNCS = ("auto", "adapter", "weights")

INT32_MAX = 2**31 - 1
"""Every integer field has an upper bound at or below this: counts end up in int4 database columns."""
MAX_STEPS = 1_000_000
"""Upper bound of step counts (a million RL steps is far past any real run; 2**63 overflowed)."""
MAX_BATCH = 4096 * 1024
"""Most candidates in one step: problems_per_step x candidates_per_problem at their bounds."""
MAX_PATH = 4096
"""Longest path or model name (Linux's PATH_MAX); longer ones cannot name anything."""
MAX_WEIGHT = 1000.0
"""Largest reward weight: only the ratios matter when normalized, and 1e308 overflowed their sum."""

# Completion-style prompts end with a signature + docstring; the model should write only the body,
# so anything that starts a new top-level statement ends the candidate.
DEFAULT_COMPLETION_STOP = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
MAX_STOP_STRINGS = 64
"""Most entries of sampling.stop (a vLLM server the run starts is told to take as many)."""


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraConfig(Section):
    """LoRA adapter settings (PEFT)."""

    r: int = setting(8, ge=1, le=1024)
    """LoRA rank (adapter width); 8-64 is typical."""
    alpha: float = setting(16.0, gt=0)
    """LoRA scaling numerator: the update is scaled by alpha / r."""
    dropout: float = setting(0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA branch during training (0 keeps rollouts and updates consistent)."""
    target_modules: str | tuple[str, ...] = setting("all-linear", max_items=256, max_length=256)
    """Modules that get adapters: "all-linear" or a list of module names such as [q_proj, v_proj]."""

    def _check(self) -> None:
        if isinstance(self.target_modules, str) and not self.target_modules.strip():
            raise ConfigError("target_modules", 'must not be empty; use "all-linear" or a list of names')
        if isinstance(self.target_modules, tuple) and not self.target_modules:
            raise ConfigError("target_modules", 'must not be an empty list; use "all-linear" or module names')


@dataclass(frozen=True)
class ModelConfig(Section):
    """The policy model: where it comes from and how it is trained."""

    name_or_path: str = setting("var/models/tiny", max_length=MAX_PATH)
    """Hugging Face hub id or local directory of the base causal LM (and its tokenizer)."""
    dtype: str = setting("float32", choices=DTYPES)
    """Weights dtype: float32 on CPU, bfloat16 on GPU; auto uses the checkpoint's own dtype."""
    lora: LoraConfig | None = setting(factory=LoraConfig)
    """LoRA adapter settings; null trains every weight (full fine-tune)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (slower)."""
    adapters: tuple[str, ...] = setting((), max_items=64, max_length=MAX_PATH)
    """PEFT adapter directories merged into the base, in order, before training (continuing a LoRA run)."""

    def _check(self) -> None:
        if not self.name_or_path.strip():
            raise ConfigError("name_or_path", "must not be empty; give a hub id or a local model directory")
        if any(not a.strip() for a in self.adapters):
            raise ConfigError("adapters", "must not contain an empty path; give PEFT adapter directories")


TURNS_NEED_CHAT = ("is {turns} but a repair turn is a chat message (the sandbox's answer as a user turn), and "
                   "prompt_style is {prompt_style}; set prompt_style: chat or turns: 1")
"""The refusal of ``sampling.turns`` > 1 without chat prompts; the new-run form checks it live with these words."""


@dataclass(frozen=True)
class SamplingConfig(Section):
    """How candidates are sampled from the policy."""

    problems_per_step: int = setting(16, ge=1, le=4096)
    """Training problems drawn per RL step."""
    candidates_per_problem: int = setting(
        8, ge=2, le=1024, recommended=(4, 16),
        below="a group of one candidate has no baseline, so every advantage is zero and nothing is learned")
    """Completions sampled per problem: the group whose mean reward is each candidate's baseline (GRPO/RLOO)."""
    max_new_tokens: int = setting(128, ge=1, le=131072)
    """Most tokens generated per completion."""
    temperature: float = setting(1.0, ge=0.0, le=10.0)
    """Sampling temperature; 0 means greedy decoding (no randomness, so no RL signal within a group)."""
    top_p: float = setting(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: keep the smallest token set with this much probability; 1 = no cut."""
    top_k: int = setting(0, ge=0, le=INT32_MAX)
    """Keep only the k most likely tokens; 0 = no top-k cut (plain sampling)."""
    prompt_style: str = setting("completion", choices=PROMPT_STYLES)
    """completion: the model continues the problem's prompt; chat: chat template, code in a fenced block."""
    stop: tuple[str, ...] | None = setting(None, max_items=MAX_STOP_STRINGS, max_length=256)
    """Strings that end a completion (cut before the first one); null = default for the prompt style."""
    thinking: bool = False
    """Thinking chat models (Qwen3, Qwen3.5): let the model reason first (the chat template's enable_thinking);
    the code is then the last fenced block after </think>, and a reply whose thinking never closed gets none."""
    dynamic: bool = False
    """Dynamic sampling (DAPO): set aside groups whose candidates all got one reward and draw more problems,
    up to max_rounds rounds, until problems_per_step informative groups exist; the update uses only those."""
    max_rounds: int = setting(3, ge=1, le=100)
    """Dynamic sampling: most rollout rounds per step, the first included (1 = only filter, never redraw)."""
    engine: str = setting("hf", choices=ENGINES)
    """hf: the trainer's own decoding loop; vllm: a vLLM server (the `vllm` section) samples from the policy
    being trained, which it is given after every optimizer step (vllm.sync)."""
    turns: int = setting(1, ge=1, le=MAX_TURNS)
    """Attempts per candidate: after a failing turn the sandbox's answer (the feedback section) is sent as a user
    message and the model answers again, until a turn passes or the turns run out; 1 = one attempt."""
    staleness: int = setting(0, ge=0, le=1)
    """Optimizer steps the sampling policy may lag the trained one. 0: each step samples the policy its previous
    step just made. 1 (engine vllm): step k+1 is sampled by the server while step k updates, so generation and
    the update overlap (one step off-policy; ppo.tis_cap corrects for it, the mismatch metrics show it)."""
    compile: str = setting("auto", choices=COMPILE_MODES)
    """engine hf: decode with a static-shape step (a fixed cache, batch buckets) captured as a CUDA graph on a GPU.
    auto: on where the step runs on CUDA, off on CPU (measured slower there: 0.63x on the tiny Qwen3.5, RESULTS.md);
    on/off force it. The tokens, log-probs and stop cut are the eager loop's (same draws for a fixed seed)."""

    def _check(self) -> None:
        if self.stop is not None and any(s == "" for s in self.stop):
            raise ConfigError("stop", "must not contain an empty string (it would cut every completion to nothing)")
        if self.thinking and self.prompt_style != "chat":
            raise ConfigError("thinking", "needs prompt_style: chat (thinking is a chat template setting); "
                                          "set prompt_style: chat or thinking: false")
        if self.staleness and self.engine != "vllm":
            raise ConfigError("staleness", f"is {self.staleness} but engine is {self.engine}: the hf engine samples "
                                           "with the model being trained, in the trainer's own process, so it "
                                           "cannot sample while that model updates; set engine: vllm or staleness: 0")
        if self.staleness and self.dynamic:
            raise ConfigError("staleness", "1 samples the next step before this one's rewards are known, and dynamic "
                                           "sampling decides each step's later rounds from its rewards; set "
                                           "dynamic: false or staleness: 0")
        if self.turns > 1 and self.prompt_style != "chat":
            raise ConfigError("turns", TURNS_NEED_CHAT.format(turns=self.turns, prompt_style=self.prompt_style))

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """The effective stop strings: ``stop`` if set, else the prompt style's default."""
        if self.stop is not None:
            return self.stop
        return DEFAULT_COMPLETION_STOP if self.prompt_style == "completion" else ()


@dataclass(frozen=True)
class RewardWeights(Section):
    """Weight of each reward dimension; each dimension is a score in [0, 1]."""

    pass_rate: float = setting(0.6, ge=0.0, le=MAX_WEIGHT)
    """Weight of the fraction of tests passed."""
    syntax: float = setting(0.15, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'the code parses / compiles'."""
    efficiency: float = setting(0.1, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'runtime within a reasonable share of the time limit'."""
    conciseness: float = setting(0.05, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'length within a reasonable range of the reference or group'."""
    format: float = setting(0.1, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'output follows the required format (fence, entry point, stdio use)'."""

    def _check(self) -> None:
        if sum(getattr(self, f.name) for f in dataclasses.fields(self)) <= 0:
            raise ConfigError("", "reward weights are all zero; give at least one dimension a positive "
                                  "weight (e.g. pass_rate: 1.0)")

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class OverlongConfig(Section):
    """What happens to candidates that hit max_new_tokens (cut off mid-answer)."""

    mode: str = setting("none", choices=OVERLONG_MODES)
    """none: scored as they are; mask: left out of the loss; soft: DAPO's length penalty over the last buffer_tokens."""
    buffer_tokens: int = setting(256, ge=1, le=1_000_000)
    """soft: the penalty grows linearly from 0 to -1 over the last buffer_tokens before max_new_tokens."""


@dataclass(frozen=True)
class RewardConfig(Section):
    """How execution results become a scalar reward per candidate."""

    weights: RewardWeights = setting(factory=RewardWeights)
    """Weight of each reward dimension (each dimension is in [0, 1])."""
    normalize: str = setting("sum", choices=REWARD_NORMALIZATIONS)
    """What the advantage estimator sees: sum = each candidate's weighted total; per_component = each dimension
    normalized within its group (mean 0, std 1; GDPO) before the weighting (events keep the plain total)."""
    weighted_mean: bool = True
    """Divide the weighted sum by the sum of weights so the total reward stays in [0, 1] (was reward.normalize)."""
    # Named reward.clip though it acts on advantages: the key is part of saved configs, so it stays.
    clip: float | None = setting(5.0, gt=0.0)
    """Clips the advantages (not the rewards) to [-clip, clip] after the group baseline; null = no clipping."""
    repeats: int = setting(1, ge=1, le=10)
    """Execute each candidate this many times and average its rewards (for noisy tests)."""
    overlong: OverlongConfig = setting(factory=OverlongConfig)
    """Truncated candidates (hit max_new_tokens): kept, masked out of the loss, or softly penalised."""
    penalize_flags: tuple[str, ...] = setting((), choices=FLAG_VOCABULARY)
    """Reward-hacking flags (e.g. [exit_before_tests, patches_runtime]) whose candidates get a total reward of 0."""
    turns: str = setting("final", choices=TURN_CREDITS)
    """Multi-turn credit (sampling.turns > 1): final = every token gets the last turn's reward; discounted = turn
    t's tokens get the sum over s >= t of turn_discount^(s - t) times turn s's reward."""
    turn_discount: float = setting(0.4, ge=0.0, le=1.0)
    """reward.turns: discounted: the weight gamma of each later turn's reward (0 = each turn only its own)."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Saved configs from before reward.normalize took ``sum | per_component`` hold it as a boolean: the
        weighted mean (true) or the plain weighted sum (false), which is now reward.weighted_mean. The boolean
        wins over a weighted_mean beside it: the web app merges a request over the defaults, which always hold
        one, so an old client's ``normalize: false`` must not lose to the default."""
        legacy = data.get("normalize")
        if not isinstance(legacy, bool):
            return data
        return {**data, "normalize": "sum", "weighted_mean": legacy}


@dataclass(frozen=True)
class PPOConfig(Section):
    """PPO / GRPO policy-optimisation hyperparameters."""

    learning_rate: float = setting(2e-6, gt=0.0, le=1.0)
    """Peak AdamW learning rate (LoRA usually wants 1e-5 to 1e-4, full fine-tune 1e-6 to 1e-5)."""
    kl_coef: float = setting(0.04, ge=0.0, le=1.0, recommended=(0.01, 0.1))
    """Weight of the KL penalty to the reference policy in the loss (recommended 0.01-0.1; 0 = off)."""
    kl_estimator: str = setting("k3", choices=KL_ESTIMATORS)
    """Per-token KL estimator (Schulman): k1 = log ratio, k2 = squared log ratio / 2, k3 = unbiased low-variance."""
    clip_range: float = setting(0.2, gt=0.0, lt=1.0, recommended=(0.1, 0.3))
    """PPO clip epsilon: the ratio is clipped to [1 - clip_range, 1 + clip_range] (recommended 0.1-0.3)."""
    clip_range_high: float | None = setting(None, gt=0.0, lt=10.0)
    """Upper epsilon for clip-higher (DAPO), e.g. 0.28; must exceed clip_range; null = symmetric."""
    dual_clip: float | None = setting(None, gt=1.0)
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens; null = off."""
    epochs_per_batch: int = setting(1, ge=1, le=16)
    """Passes of PPO updates over each step's rollouts."""
    minibatch_size: int | None = setting(None, ge=1, le=MAX_BATCH)
    """Candidates per optimizer step; null = the whole step's batch (one optimizer step per epoch)."""
    micro_batch_size: int = setting(32, ge=1, le=MAX_BATCH)
    """Candidates per forward/backward (gradient accumulation); only affects memory, never the result."""
    max_grad_norm: float | None = setting(1.0, gt=0.0)
    """Clip the global gradient norm to this; null = no clipping."""
    advantage: str = setting("grpo", choices=ADVANTAGE_ESTIMATORS)
    """Advantage estimator: grpo (group mean/std), rloo (leave-one-out), dr_grpo (group mean, no std)."""
    loss_aggregation: str = setting("token_mean", choices=LOSS_AGGREGATIONS)
    """token_mean: average over all tokens of the batch; seq_mean: average per sequence, then over sequences."""
    drop_zero_variance_groups: bool = False
    """Leave out groups whose candidates all got the same reward (no learning signal); sampling.dynamic also
    draws more problems to fill the batch."""
    weight_decay: float = setting(0.0, ge=0.0, le=1.0)
    """AdamW weight decay."""
    tis_cap: float | None = setting(2.0, ge=1.0, le=100.0)
    """Truncated importance sampling: weight each token's loss by min(pi_old / pi_sampler, tis_cap) to correct
    sampler/trainer log-prob mismatch; null = off. Default 2.0 (Yao et al. 2025's cap), following the measured
    mismatch (benchmarks/RESULTS.md, issue 33): on an H200 in bfloat16, recurrent decoding vs chunked scoring put
    rollout/mismatch_kl at 1.0-1.2e-3 (the run page's warning level) with single tokens 0.20-0.23 nats apart, i.e.
    ratios within 0.79-1.26, which 2.0 corrects without truncating; in float32 on CPU the mismatch is ~1e-13 and
    every weight is 1 to within 1e-6, so the default changes nothing there."""

    def _check(self) -> None:
        if self.clip_range_high is not None and self.clip_range_high <= self.clip_range:
            raise ConfigError("clip_range_high", f"must be greater than clip_range ({self.clip_range}); "
                                                 f"got {self.clip_range_high}. Use null for symmetric clipping")


@dataclass(frozen=True)
class ScheduleConfig(Section):
    """Learning-rate and KL-coefficient schedule ("stable first, then faster" warm-up)."""

    warmup: str = setting("none", choices=WARMUPS)
    """none: constant lr and KL from step 0; stable_then_fast: start with a low lr and a strong KL, then ramp to the configured values."""
    warmup_steps: int = setting(10, ge=0, le=MAX_STEPS)
    """Steps over which the learning rate rises linearly from lr_start_factor * learning_rate to learning_rate."""
    lr_start_factor: float = setting(0.1, ge=0.0, le=1.0)
    """Fraction of the learning rate used at step 0 of a stable_then_fast warm-up."""
    kl_warmup_steps: int | None = setting(None, ge=0, le=MAX_STEPS)
    """Steps over which the KL coefficient eases from kl_start_factor * kl_coef to kl_coef; null = warmup_steps."""
    kl_start_factor: float = setting(2.0, ge=1.0, le=100.0)
    """Multiple of kl_coef applied at step 0 of a stable_then_fast warm-up (a stronger anchor early)."""
    lr_decay: str = setting("constant", choices=LR_DECAYS)
    """Learning rate after warm-up: constant, or linear / cosine decay to min_lr_factor at the last step."""
    min_lr_factor: float = setting(0.0, ge=0.0, le=1.0)
    """Fraction of the learning rate reached at the last step when lr_decay is linear or cosine."""

    def lr_factor(self, step: int, total_steps: int) -> float:
        """Multiplier of ``ppo.learning_rate`` for optimizer step ``step`` (0-based) of ``total_steps``."""
        warm = self.warmup_steps if self.warmup == "stable_then_fast" else 0
        if step < warm:
            return self.lr_start_factor + (1.0 - self.lr_start_factor) * step / warm
        if self.lr_decay == "constant" or total_steps <= warm + 1:
            return 1.0
        progress = min(1.0, (step - warm) / (total_steps - 1 - warm))
        shape = progress if self.lr_decay == "linear" else 0.5 * (1.0 - math.cos(math.pi * progress))
        return 1.0 - (1.0 - self.min_lr_factor) * shape

    def kl_factor(self, step: int) -> float:
        """Multiplier of ``ppo.kl_coef`` at RL step ``step`` (0-based)."""
        if self.warmup != "stable_then_fast":
            return 1.0
        warm = self.warmup_steps if self.kl_warmup_steps is None else self.kl_warmup_steps
        if step >= warm:
            return 1.0
        return self.kl_start_factor + (1.0 - self.kl_start_factor) * step / warm


@dataclass(frozen=True)
class TrainConfig(Section):
    """Run length, seed, evaluation and checkpoint cadence."""

    steps: int = setting(60, ge=1, le=MAX_STEPS)
    """Number of RL steps (each: sample, execute, reward, update)."""
    seed: int = setting(0, ge=0, le=INT32_MAX)
    """Seed for problem order, sampling and initialisation."""
    eval_every: int = setting(10, ge=0, le=MAX_STEPS)
    """Evaluate on the heldout split every this many steps (also at step 0 and at the end); 0 = only start and end."""
    eval_samples: int = setting(8, ge=1, le=1024)
    """Completions sampled per held-out problem for pass@k."""
    checkpoint_every: int = setting(20, ge=0, le=MAX_STEPS)
    """Save a resumable checkpoint every this many steps (always at the end); 0 = only at the end."""
    save_merged: bool = False
    """Also export a merged model (base + LoRA, safetensors) with the final checkpoint."""


@dataclass(frozen=True)
class SandboxConfig(Section):
    """Where and how candidates are executed."""

    backend: str = setting("process", max_length=64)
    """Execution backend of the sandbox (see `python -m sandbox run --help`)."""
    workers: int = setting(2, ge=1, le=256)
    """Parallel executions."""
    timeout_s: float | None = setting(None, gt=0.0, le=600.0)
    """Time limit per execution in seconds; null = each problem's own time_limit_s."""
    memory_mb: int | None = setting(None, ge=16, le=16384)
    """Memory limit per execution in MiB; null = each problem's own memory_limit_mb."""
    mode: str = setting("warm", choices=SANDBOX_MODES)
    """warm: reuse isolated pre-started interpreters (fast); cold: a fresh process per execution."""
    endpoints: tuple[str, ...] = ()
    """URLs of `python -m sandbox serve` replicas (token from CRUCIBLE_SANDBOX_TOKEN); empty = the local pool."""

    def _check(self) -> None:
        from sandbox.remote import check_endpoint_url

        for i, url in enumerate(self.endpoints):
            try:
                check_endpoint_url(url)
            except ValueError as e:
                raise ConfigError(f"endpoints[{i}]", str(e)) from None
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ConfigError("endpoints", "lists a URL twice; give each replica once")
        if not self.backend.strip():
            raise ConfigError("backend", 'must not be empty; "process" is the default backend')
        from sandbox.backends import backend_names

        if self.backend not in backend_names():
            raise ConfigError("backend", f"must be one of {', '.join(backend_names())}; got {self.backend!r}")


@dataclass(frozen=True)
class VLLMConfig(Section):
    """The vLLM server that samples when sampling.engine is vllm."""

    url: str | None = setting(None, max_length=2048)
    """A running vLLM OpenAI-compatible server (http://host:port) that serves the run's base model with LoRA
    enabled; null = the trainer starts one for the run from the engine environment and stops it with the run."""
    gpu_memory_utilization: float = setting(0.4, gt=0.0, le=0.95)
    """Share of the GPU's memory the server may take (the rest is the trainer's, on the same GPU)."""
    max_model_len: int | None = setting(None, ge=16, le=1_048_576)
    """Longest prompt + completion in tokens; null = prompt budget + max_new_tokens rounded up (or the model's)."""
    tensor_parallel_size: int = setting(1, ge=1, le=64)
    """GPUs the server splits the model over."""
    dtype: str = setting("auto", choices=VLLM_DTYPES)
    """The server's weights and activations; auto = bfloat16 (vLLM's CPU kernels need it; half the memory on GPU)."""
    sync: str = setting("auto", choices=VLLM_SYNCS)
    """How the server gets the policy after each optimizer step. adapter: the LoRA adapter is saved and hot-loaded
    (small; vLLM's LoRA kernels run it beside the base). weights: the policy's weights (LoRA merged in) are written
    in the server's dtype and reloaded in place, so it samples at base speed and a full fine-tune works; each step
    writes the whole model. auto: weights for a full fine-tune and for a server of the run's own on a machine
    without a GPU (vLLM's CPU LoRA path runs at about half speed), else adapter."""

    def _check(self) -> None:
        if self.url is not None:
            url = self.url.strip()
            if not url.startswith(("http://", "https://")) or len(url) < 10 or any(
                    c.isspace() or ord(c) < 32 for c in url):
                raise ConfigError("url", f"must be an http(s) URL of a vLLM server such as http://127.0.0.1:8000 "
                                         f"(or null to start one); got {self.url[:80]!r}")


@dataclass(frozen=True)
class DifficultyConfig(Section):
    """Train problems left out at launch by the pass rates of a difficulty probe (`python -m training probe`)."""

    probe: str | None = setting(None, max_length=MAX_PATH)
    """Output file of `python -m training probe` whose pass rates the rules below read; null = no filter."""
    drop_unsolved: bool = False
    """Leave out train problems the probe never solved (pass rate 0): every group of theirs has zero reward variance."""
    drop_solved: bool = False
    """Leave out train problems the probe always solved (pass rate 1): nothing left to learn from them."""

    def _check(self) -> None:
        if self.probe is not None and not self.probe.strip():
            raise ConfigError("probe", "must not be empty; give the path of a `python -m training probe` output "
                                       "or null")
        if (self.drop_unsolved or self.drop_solved) and self.probe is None:
            rule = "drop_unsolved" if self.drop_unsolved else "drop_solved"
            raise ConfigError("probe", f"is needed by {rule}: give the path of a `python -m training probe` "
                                       f"output, or set {rule}: false")


@dataclass(frozen=True)
class FeedbackConfig(Section):
    """What the model is told after a failing turn (sampling.turns > 1): the sandbox's answer, never the solution."""

    tests_shown: int = setting(3, ge=0, le=100)
    """Failing tests described per feedback message (function problems: the test's text and error; stdio: which
    case failed and how, never a hidden case's expected output)."""
    stderr_chars: int = setting(2000, ge=0, le=100_000)
    """Characters of the end of the program's stderr (the traceback) shown; 0 = none."""
    include_code: bool = False
    """Repeat the failing code in the feedback message (it is already in the conversation as the model's reply)."""


TRACKER_NAME_MAX = 128
"""Longest W&B project/entity or MLflow experiment name a run config may give."""
WANDB_MODES = ("offline", "online")
_TRACKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\- /]*")
_RELATIVE_STORE = re.compile(r"[A-Za-z0-9_.\-/]+")


def _check_tracker_name(value: str | None, name: str, pattern: re.Pattern, allowed: str) -> None:
    if value is not None and not pattern.fullmatch(value):
        raise ConfigError(name, f"must start with a letter or digit and hold only {allowed}; got {value[:80]!r}")


@dataclass(frozen=True)
class WandbConfig(Section):
    """Weights & Biases: where the run is logged (the API key only from the worker's WANDB_API_KEY, never here)."""

    project: str = setting("crucible", max_length=TRACKER_NAME_MAX)
    """W&B project the run is logged to (letters, digits, _ . -)."""
    entity: str | None = setting(None, max_length=TRACKER_NAME_MAX)
    """W&B team or user that owns the project; null = the API key's default entity."""
    mode: str = setting("offline", choices=WANDB_MODES)
    """offline: files under RUN_DIR/wandb only, no network (upload later with `wandb sync RUN_DIR/wandb/offline-run-*`);
    online: streamed to the W&B server of the worker's environment (WANDB_API_KEY, WANDB_BASE_URL)."""

    def _check(self) -> None:
        _check_tracker_name(self.project, "project", _TRACKER_NAME, "letters, digits, _ . -")
        _check_tracker_name(self.entity, "entity", _TRACKER_NAME, "letters, digits, _ . -")


@dataclass(frozen=True)
class MlflowConfig(Section):
    """MLflow: a file store inside the run's directory or a tracking server (credentials only from the worker's
    MLFLOW_TRACKING_TOKEN / _USERNAME / _PASSWORD, never here)."""

    tracking_uri: str | None = setting(None, max_length=2048)
    """null = a file store at RUN_DIR/mlruns; file:PATH = a file store at PATH relative to the run's directory
    (no absolute path, no ..); http(s)://host[:port][/path] = a tracking server (no user:password@ in the URL)."""
    experiment: str = setting("crucible", max_length=TRACKER_NAME_MAX)
    """MLflow experiment the run is logged under (made when missing; letters, digits, space, _ . - /)."""

    def _check(self) -> None:
        _check_tracker_name(self.experiment, "experiment", _EXPERIMENT_NAME, "letters, digits, spaces, _ . - /")
        if self.tracking_uri is not None:
            try:
                check_tracking_uri(self.tracking_uri)
            except ValueError as e:
                raise ConfigError("tracking_uri", str(e)) from None


def check_tracking_uri(uri: str) -> str:
    """``uri`` if a run config may name it as ``tracking.mlflow.tracking_uri``, else ValueError saying why.

    A file store may only be a relative path under the run's directory: a tenant's run config must not make
    the worker write anywhere else on the server (``file:/etc/...``, ``file:../../other-run``); servers are
    http(s) URLs without credentials in them (those come from the worker's environment)."""
    import urllib.parse

    if not uri.strip() or uri != uri.strip() or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in uri):
        raise ValueError(f"must be file:RELATIVE/PATH or an http(s) URL, with no spaces or control characters; "
                         f"got {uri[:80]!r}")
    if uri.startswith("file:"):
        path = uri[len("file:"):]
        if not _RELATIVE_STORE.fullmatch(path) or path.startswith("/"):
            raise ValueError(f"a file store must be a relative path inside the run's directory, of letters, digits, "
                             f"_ . - /, such as file:mlruns (null = file:mlruns); got {uri[:80]!r}")
        parts = Path(path).parts
        if not parts:
            raise ValueError(f"a file store must be a directory inside the run's directory (not the run's directory "
                             f"itself) such as file:mlruns; got {uri[:80]!r}")
        if any(part == ".." for part in parts):
            raise ValueError(f"a file store must stay inside the run's directory: no '..' in {uri[:80]!r}")
        return uri
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"must be null, file:RELATIVE/PATH (inside the run's directory) or an http(s) URL of an "
                         f"MLflow tracking server such as http://mlflow.internal:5000; got {uri[:80]!r}")
    if parsed.username is not None or parsed.password is not None:
        raise ValueError("must not carry credentials (user:password@): the worker's MLFLOW_TRACKING_USERNAME / "
                         "MLFLOW_TRACKING_PASSWORD / MLFLOW_TRACKING_TOKEN give them")
    if parsed.query or parsed.fragment:
        raise ValueError(f"must be a server's base URL, without ?query or #fragment; got {uri[:80]!r}")
    try:
        parsed.port
    except ValueError:
        raise ValueError(f"has a bad port: {uri[:80]!r}") from None
    return uri


@dataclass(frozen=True)
class TrackingConfig(Section):
    """Experiment trackers the run also logs to (its own events and pages are always written)."""

    tensorboard: bool = False
    """Write TensorBoard event files under RUN_DIR/tensorboard (step metrics, held-out results, the config)."""
    wandb: WandbConfig | None = None
    """Log to Weights & Biases (metrics, config, held-out results, the final checkpoint as a model artifact);
    null = off."""
    mlflow: MlflowConfig | None = None
    """Log to MLflow (metrics, config as params, held-out results, the final checkpoint as artifacts); null = off."""

    @property
    def enabled(self) -> bool:
        return self.tensorboard or self.wandb is not None or self.mlflow is not None


@dataclass(frozen=True)
class MonitorConfig(Section):
    """Divergence warnings: bounds on each step's metrics; a run past one gets a warning (once per condition) on
    its page and in its done event, and goes on."""

    kl_max: float | None = setting(10.0, gt=0.0)
    """Warn when a step's KL to the reference (metric kl, nats/token) exceeds this or is not finite; null = never.
    The repair benchmark's runs (benchmarks/RESULTS.md) ended under 0.5."""
    loss_max: float | None = setting(10.0, gt=0.0)
    """Warn when a step's |loss/policy + loss/kl| exceeds this or is not finite; null = never."""
    flat_reward_steps: int | None = setting(10, ge=2, le=MAX_STEPS)
    """Warn when this many steps in a row had no candidate passing every test and a flat reward/mean
    (within flat_reward_tol): the run learns nothing; null = never."""
    flat_reward_tol: float = setting(0.01, ge=0.0, le=1.0)
    """How much reward/mean may move (max - min over those steps) and still count as flat."""


@dataclass(frozen=True)
class RunConfig(Section):
    """A whole training run."""

    model: ModelConfig = setting(factory=ModelConfig)
    """The policy model and how it is trained (LoRA or full)."""
    problems: str = setting("data/demo/problems.jsonl", max_length=MAX_PATH)
    """Problem file (native JSONL, HumanEval, MBPP, APPS, CodeContests; .jsonl or .jsonl.gz)."""
    sampling: SamplingConfig = setting(factory=SamplingConfig)
    """How candidates are sampled."""
    reward: RewardConfig = setting(factory=RewardConfig)
    """How execution results become rewards."""
    ppo: PPOConfig = setting(factory=PPOConfig)
    """Policy optimisation hyperparameters."""
    schedule: ScheduleConfig = setting(factory=ScheduleConfig)
    """Learning-rate and KL schedule."""
    train: TrainConfig = setting(factory=TrainConfig)
    """Length of the run, evaluation and checkpoint cadence."""
    sandbox: SandboxConfig = setting(factory=SandboxConfig)
    """Where and how candidates run."""
    difficulty: DifficultyConfig = setting(factory=DifficultyConfig)
    """Train problems left out at launch by a difficulty probe's pass rates (held-out problems never are)."""
    vllm: VLLMConfig = setting(factory=VLLMConfig)
    """The vLLM server, when sampling.engine is vllm."""
    feedback: FeedbackConfig = setting(factory=FeedbackConfig)
    """What the model is told after a failing turn, when sampling.turns > 1."""
    tracking: TrackingConfig = setting(factory=TrackingConfig)
    """Experiment trackers (TensorBoard, W&B, MLflow) the run also logs to; all off by default."""
    monitor: MonitorConfig = setting(factory=MonitorConfig)
    """Divergence warnings: bounds on KL, loss and a flat reward that a run is warned about when it passes them."""

    def _check(self) -> None:
        if (self.reward.normalize == "per_component" and self.sampling.turns > 1
                and self.reward.turns == "discounted"):
            raise ConfigError("reward.normalize", "per_component normalizes each candidate's dimensions within its "
                                                  "group, but reward.turns: discounted credits each turn from its "
                                                  "return over the group's pool of turns, which has no dimensions; "
                                                  "use reward.turns: final, or reward.normalize: sum")
        if not self.problems.strip():
            raise ConfigError("problems", "must not be empty; give the path of a problem file")
        if self.sampling.engine == "vllm" and self.model.lora is None and self.vllm.sync == "adapter":
            raise ConfigError("vllm.sync", "is adapter, but a full fine-tune (model.lora: null) has no adapter to "
                                           "load: the server would sample a stale policy. Set vllm.sync: weights "
                                           "(or auto), or give model.lora (e.g. {r: 16})")
        batch = self.sampling.problems_per_step * self.sampling.candidates_per_problem
        if self.ppo.minibatch_size is not None and self.ppo.minibatch_size > batch:
            raise ConfigError(
                "ppo.minibatch_size",
                f"is {self.ppo.minibatch_size} but a step only has {batch} candidates "
                f"(problems_per_step x candidates_per_problem); use at most {batch}, or null for the whole batch")


SECTIONS = (LoraConfig, ModelConfig, SamplingConfig, RewardWeights, OverlongConfig, RewardConfig, PPOConfig,
            ScheduleConfig, TrainConfig, SandboxConfig, VLLMConfig, DifficultyConfig, FeedbackConfig, WandbConfig,
            MlflowConfig, TrackingConfig, MonitorConfig, RunConfig)


def field_docs() -> dict[str, dict[str, str]]:
    """``{ClassName: {field: docstring}}`` of this module's sections (the line under each field)."""
    return module_field_docs(__name__)


# --------------------------------------------------------------------------------------------------
# dict <-> RunConfig
# --------------------------------------------------------------------------------------------------


def config_from_dict(data: dict | None) -> RunConfig:
    """Build a validated RunConfig; missing keys take their defaults. Raises ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("", f"the config must be a mapping of sections (model, sampling, ppo, ...); got {data!r}")
    return from_dict(RunConfig, data)


def leaf_fields() -> dict[str, dataclasses.Field]:
    """Every leaf field of RunConfig by dotted name (``train.steps``), sections descended into."""
    return _leaf_fields(RunConfig)


def check_ceilings(cfg: RunConfig, ceilings: typing.Mapping[str, float]) -> None:
    """Apply a deployment's own upper bounds (``{"train.steps": 1000}``) on top of the fields' bounds.

    A server lends its GPUs and CPUs to people who did not pay for them, so it may allow less than
    the dataclass does; ``json_schema(ceilings)`` shows the same limits. Raises ConfigError naming
    the field; a ceiling for a name that is not a numeric field is a programming error (KeyError).
    """
    fields = leaf_fields()
    for dotted, ceiling in ceilings.items():
        if dotted not in fields:
            raise KeyError(f"no config field {dotted!r} to put a ceiling on")
        node: typing.Any = cfg
        for part in dotted.split("."):
            node = None if node is None else getattr(node, part)
        if node is not None and not isinstance(node, bool) and node > ceiling:
            raise ConfigError(dotted, f"must be <= {ceiling} on this server (its limit); got {node!r}")


def apply_overrides(data: dict | None, overrides: list[str] | tuple[str, ...]) -> dict:
    """Apply ``section.key=value`` overrides (values parsed as YAML) to a copy of a config dict.

    ``ppo.learning_rate=1e-5``, ``model.lora=null``, ``sampling.stop=["\\n\\n"]``. A path through a
    null section (``model.lora.r=16`` after ``lora: null``) recreates that section.
    """
    import copy

    import yaml

    out = copy.deepcopy(data) if data else {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError("--set", f"expected KEY=VALUE such as ppo.learning_rate=1e-5; got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        if not key or any(not p for p in parts):
            raise ConfigError("--set", f"bad key {key!r} in {item!r}; use dotted names such as ppo.clip_range")
        try:
            value = yaml_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(key, f"cannot parse value {raw!r} of --set: {e}") from None
        node = out
        for i, p in enumerate(parts[:-1]):
            if not isinstance(node.get(p), dict):
                if p in node and node[p] is not None:
                    raise ConfigError(".".join(parts[:i + 1]), f"is {node[p]!r}, not a section; cannot set {key}")
                node[p] = {}
            node = node[p]
        node[parts[-1]] = value
    return out


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML run config, apply ``--set`` overrides, validate. Raises ConfigError."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config", f"file not found: {path}") from None
    except OSError as e:
        raise ConfigError("config", f"cannot read {path}: {e.strerror}") from None
    try:
        data = yaml_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("config", f"{path} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a mapping of sections (model:, sampling:, ...), "
                                    f"not {type(data).__name__}")
    return config_from_dict(apply_overrides(data or {}, overrides))


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML that ``load_config`` reads back to an equal config."""
    import yaml

    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# JSON Schema
# --------------------------------------------------------------------------------------------------


config_to_dict = to_dict
"""Plain dict (lists, not tuples) that ``config_from_dict`` turns back into an equal config."""


def json_schema(ceilings: typing.Mapping[str, float] | None = None) -> dict:
    """JSON Schema (draft 2020-12) of the whole RunConfig: types, defaults, bounds, enums, descriptions.

    ``ceilings`` (a deployment's limits, see ``check_ceilings``) lower the fields' maximums.
    """
    schema = section_schema(RunConfig, ceilings)
    schema["description"] = "Crucible training run configuration (YAML keys = these property names)."
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://crucible.local/schemas/run-config.json", **schema}
