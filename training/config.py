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
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from sandbox.flags import VOCABULARY as FLAG_VOCABULARY

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


class ConfigError(ValueError):
    """A bad config value. ``field`` is the dotted path, e.g. ``ppo.clip_range``."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def prefixed(self, prefix: str) -> "ConfigError":
        return ConfigError(f"{prefix}.{self.field}" if self.field else prefix, self.message)


class LostNumber(str):
    """A number literal no float holds as written: ``1e-400`` or a 401-digit fraction (read as 0.0), ``1e400``
    (read as inf). The readers of config text (``yaml_load``, ``json_number``) keep such a literal as this
    string, so that validation refuses it naming the field instead of taking a 0 nobody wrote."""


def json_number(text: str) -> float | LostNumber:
    """``float(text)`` for a number literal, or ``LostNumber(text)`` when the float would not be the number
    written (``json.loads(..., parse_float=json_number)``)."""
    value = float(text)
    if value == 0.0 and any(c in "123456789" for c in text.lower().partition("e")[0]):
        return LostNumber(text)
    if math.isinf(value) and not any(word in text.lower() for word in ("inf", "infinity")):
        return LostNumber(text)
    return value


def yaml_load(text: str) -> Any:
    """``yaml.safe_load(text)``, keeping a float literal no float holds (``1.0e-400``) as a ``LostNumber``."""
    import yaml

    return yaml.load(text, Loader=_yaml_loader())


@functools.cache
def _yaml_loader() -> type:
    import yaml

    def construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float | LostNumber:
        value = loader.construct_yaml_float(node)
        if value == 0.0 or math.isinf(value):
            try:
                return json_number(node.value.replace("_", ""))
            except ValueError:  # .inf, a sexagesimal 1:30.0: YAML's own spellings, read as YAML does
                pass
        return value

    class ConfigLoader(yaml.SafeLoader):
        pass

    ConfigLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    return ConfigLoader


def lost_number_message(text: str) -> str:
    value = float(text)
    shown = text if len(text) <= 40 else f"{text[:20]}...{text[-12:]} ({len(text)} characters)"
    if value == 0.0:
        return (f"{shown} is too small for a float and would be read as 0 (the smallest positive one is about "
                f"5e-324); write 0 if you mean 0")
    return f"{shown} is too large for a float (the largest is about 1.8e308)"


def _field(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, ge=None, gt=None,
           le=None, lt=None, choices=None, recommended=None, below=None, max_length=None, max_items=None) -> Any:
    """A dataclass field whose bounds/choices drive both validation and the JSON schema.

    ``below`` says why a value under the lower bound cannot work; the error for such a value ends with it.
    ``max_length`` bounds a string (each string of a list); ``max_items`` the entries of a list.
    """
    meta = {k: v for k, v in dict(ge=ge, gt=gt, le=le, lt=lt, choices=choices, recommended=recommended,
                                   below=below, max_length=max_length, max_items=max_items).items() if v is not None}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class _Section:
    """Base for config sections: generic checks from field metadata, then ``_check()``."""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # Friendly coercions for values built in Python (lists -> tuples keeps the object hashable).
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
                value = getattr(self, f.name)
            _check_type(value, hints[f.name], f.name)
            _check_bounds(value, f)
        self._check()

    def _check(self) -> None:  # cross-field rules of one section
        pass


def _check_bounds(value: Any, f: dataclasses.Field) -> None:
    if value is None or isinstance(value, bool):
        return
    m = f.metadata
    _check_lengths(value, f.name, m)
    # A list field with choices (reward.penalize_flags) checks each of its items.
    for item in (value if isinstance(value, tuple) and "choices" in m else (value,)):
        if "choices" in m and item not in m["choices"]:
            close = difflib.get_close_matches(str(item), m["choices"], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f.name, f"must be one of {', '.join(m['choices'])}; got {item!r}{hint}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f.name, f"must be a finite number, got {value!r}")
        ok = ((m.get("ge") is None or value >= m["ge"]) and (m.get("gt") is None or value > m["gt"])
              and (m.get("le") is None or value <= m["le"]) and (m.get("lt") is None or value < m["lt"]))
        if not ok:
            raise ConfigError(f.name, f"must be {_range_text(m)}; got {value!r}" + _below_text(m, value)
                              + _recommend_text(m))


def _check_lengths(value: Any, name: str, m: typing.Mapping) -> None:
    """``max_items`` of a list, ``max_length`` of a string or of each string of a list."""
    if isinstance(value, tuple) and "max_items" in m and len(value) > m["max_items"]:
        raise ConfigError(name, f"must have at most {m['max_items']} entries; got {len(value)}")
    for i, item in enumerate(value if isinstance(value, tuple) else (value,)):
        if isinstance(item, str) and "max_length" in m and len(item) > m["max_length"]:
            where = f" (entry {i})" if isinstance(value, tuple) else ""
            raise ConfigError(name, f"must be at most {m['max_length']} characters long{where}; "
                                    f"got {len(item)}: {item[:40]!r}...")


def _check_text(value: str, path: str) -> str:
    """``value`` when it is text UTF-8 can carry; a lone surrogate (``"\\ud800"``, valid JSON) is refused
    here rather than failing later where the config is written or stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(path, f"must be valid Unicode text; got a lone surrogate {value[e.start]!r} at "
                                f"character {e.start} of {value[:40]!r}") from None
    return value


def _range_text(m: dict) -> str:
    lo = f"{'>=' if 'ge' in m else '>'} {m.get('ge', m.get('gt'))}" if ("ge" in m or "gt" in m) else ""
    hi = f"{'<=' if 'le' in m else '<'} {m.get('le', m.get('lt'))}" if ("le" in m or "lt" in m) else ""
    return " and ".join(x for x in (lo, hi) if x)


def _recommend_text(m: dict) -> str:
    if "recommended" in m:
        lo, hi = m["recommended"]
        return f" (recommended range {lo}-{hi})"
    return ""


def _below_text(m: dict, value: float) -> str:
    low = ("ge" in m and value < m["ge"]) or ("gt" in m and value <= m["gt"])
    return f": {m['below']}" if low and "below" in m else ""


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraConfig(_Section):
    """LoRA adapter settings (PEFT)."""

    r: int = _field(8, ge=1, le=1024)
    """LoRA rank (adapter width); 8-64 is typical."""
    alpha: float = _field(16.0, gt=0)
    """LoRA scaling numerator: the update is scaled by alpha / r."""
    dropout: float = _field(0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA branch during training (0 keeps rollouts and updates consistent)."""
    target_modules: str | tuple[str, ...] = _field("all-linear", max_items=256, max_length=256)
    """Modules that get adapters: "all-linear" or a list of module names such as [q_proj, v_proj]."""

    def _check(self) -> None:
        if isinstance(self.target_modules, str) and not self.target_modules.strip():
            raise ConfigError("target_modules", 'must not be empty; use "all-linear" or a list of names')
        if isinstance(self.target_modules, tuple) and not self.target_modules:
            raise ConfigError("target_modules", 'must not be an empty list; use "all-linear" or module names')


@dataclass(frozen=True)
class ModelConfig(_Section):
    """The policy model: where it comes from and how it is trained."""

    name_or_path: str = _field("var/models/tiny", max_length=MAX_PATH)
    """Hugging Face hub id or local directory of the base causal LM (and its tokenizer)."""
    dtype: str = _field("float32", choices=DTYPES)
    """Weights dtype: float32 on CPU, bfloat16 on GPU; auto uses the checkpoint's own dtype."""
    lora: LoraConfig | None = _field(factory=LoraConfig)
    """LoRA adapter settings; null trains every weight (full fine-tune)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (slower)."""
    adapters: tuple[str, ...] = _field((), max_items=64, max_length=MAX_PATH)
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
class SamplingConfig(_Section):
    """How candidates are sampled from the policy."""

    problems_per_step: int = _field(16, ge=1, le=4096)
    """Training problems drawn per RL step."""
    candidates_per_problem: int = _field(
        8, ge=2, le=1024, recommended=(4, 16),
        below="a group of one candidate has no baseline, so every advantage is zero and nothing is learned")
    """Completions sampled per problem: the group whose mean reward is each candidate's baseline (GRPO/RLOO)."""
    max_new_tokens: int = _field(128, ge=1, le=131072)
    """Most tokens generated per completion."""
    temperature: float = _field(1.0, ge=0.0, le=10.0)
    """Sampling temperature; 0 means greedy decoding (no randomness, so no RL signal within a group)."""
    top_p: float = _field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: keep the smallest token set with this much probability; 1 = no cut."""
    top_k: int = _field(0, ge=0, le=INT32_MAX)
    """Keep only the k most likely tokens; 0 = no top-k cut (plain sampling)."""
    prompt_style: str = _field("completion", choices=PROMPT_STYLES)
    """completion: the model continues the problem's prompt; chat: chat template, code in a fenced block."""
    stop: tuple[str, ...] | None = _field(None, max_items=64, max_length=256)
    """Strings that end a completion (cut before the first one); null = default for the prompt style."""
    thinking: bool = False
    """Thinking chat models (Qwen3, Qwen3.5): let the model reason first (the chat template's enable_thinking);
    the code is then the last fenced block after </think>, and a reply whose thinking never closed gets none."""
    dynamic: bool = False
    """Dynamic sampling (DAPO): set aside groups whose candidates all got one reward and draw more problems,
    up to max_rounds rounds, until problems_per_step informative groups exist; the update uses only those."""
    max_rounds: int = _field(3, ge=1, le=100)
    """Dynamic sampling: most rollout rounds per step, the first included (1 = only filter, never redraw)."""
    engine: str = _field("hf", choices=ENGINES)
    """hf: the trainer's own decoding loop; vllm: a vLLM server (the `vllm` section) samples from the policy
    being trained, which it is given after every optimizer step (vllm.sync)."""
    turns: int = _field(1, ge=1, le=MAX_TURNS)
    """Attempts per candidate: after a failing turn the sandbox's answer (the feedback section) is sent as a user
    message and the model answers again, until a turn passes or the turns run out; 1 = one attempt."""
    staleness: int = _field(0, ge=0, le=1)
    """Optimizer steps the sampling policy may lag the trained one. 0: each step samples the policy its previous
    step just made. 1 (engine vllm): step k+1 is sampled by the server while step k updates, so generation and
    the update overlap (one step off-policy; ppo.tis_cap corrects for it, the mismatch metrics show it)."""
    compile: str = _field("auto", choices=COMPILE_MODES)
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
class RewardWeights(_Section):
    """Weight of each reward dimension; each dimension is a score in [0, 1]."""

    pass_rate: float = _field(0.6, ge=0.0, le=MAX_WEIGHT)
    """Weight of the fraction of tests passed."""
    syntax: float = _field(0.15, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'the code parses / compiles'."""
    efficiency: float = _field(0.1, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'runtime within a reasonable share of the time limit'."""
    conciseness: float = _field(0.05, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'length within a reasonable range of the reference or group'."""
    format: float = _field(0.1, ge=0.0, le=MAX_WEIGHT)
    """Weight of 'output follows the required format (fence, entry point, stdio use)'."""

    def _check(self) -> None:
        if sum(getattr(self, f.name) for f in dataclasses.fields(self)) <= 0:
            raise ConfigError("", "reward weights are all zero; give at least one dimension a positive "
                                  "weight (e.g. pass_rate: 1.0)")

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class OverlongConfig(_Section):
    """What happens to candidates that hit max_new_tokens (cut off mid-answer)."""

    mode: str = _field("none", choices=OVERLONG_MODES)
    """none: scored as they are; mask: left out of the loss; soft: DAPO's length penalty over the last buffer_tokens."""
    buffer_tokens: int = _field(256, ge=1, le=1_000_000)
    """soft: the penalty grows linearly from 0 to -1 over the last buffer_tokens before max_new_tokens."""


@dataclass(frozen=True)
class RewardConfig(_Section):
    """How execution results become a scalar reward per candidate."""

    weights: RewardWeights = _field(factory=RewardWeights)
    """Weight of each reward dimension (each dimension is in [0, 1])."""
    normalize: str = _field("sum", choices=REWARD_NORMALIZATIONS)
    """What the advantage estimator sees: sum = each candidate's weighted total; per_component = each dimension
    normalized within its group (mean 0, std 1; GDPO) before the weighting (events keep the plain total)."""
    weighted_mean: bool = True
    """Divide the weighted sum by the sum of weights so the total reward stays in [0, 1] (was reward.normalize)."""
    # Named reward.clip though it acts on advantages: the key is part of saved configs, so it stays.
    clip: float | None = _field(5.0, gt=0.0)
    """Clips the advantages (not the rewards) to [-clip, clip] after the group baseline; null = no clipping."""
    repeats: int = _field(1, ge=1, le=10)
    """Execute each candidate this many times and average its rewards (for noisy tests)."""
    overlong: OverlongConfig = _field(factory=OverlongConfig)
    """Truncated candidates (hit max_new_tokens): kept, masked out of the loss, or softly penalised."""
    penalize_flags: tuple[str, ...] = _field((), choices=FLAG_VOCABULARY)
    """Reward-hacking flags (e.g. [exit_before_tests, patches_runtime]) whose candidates get a total reward of 0."""
    turns: str = _field("final", choices=TURN_CREDITS)
    """Multi-turn credit (sampling.turns > 1): final = every token gets the last turn's reward; discounted = turn
    t's tokens get the sum over s >= t of turn_discount^(s - t) times turn s's reward."""
    turn_discount: float = _field(0.4, ge=0.0, le=1.0)
    """reward.turns: discounted: the weight gamma of each later turn's reward (0 = each turn only its own)."""


@dataclass(frozen=True)
class PPOConfig(_Section):
    """PPO / GRPO policy-optimisation hyperparameters."""

    learning_rate: float = _field(2e-6, gt=0.0, le=1.0)
    """Peak AdamW learning rate (LoRA usually wants 1e-5 to 1e-4, full fine-tune 1e-6 to 1e-5)."""
    kl_coef: float = _field(0.04, ge=0.0, le=1.0, recommended=(0.01, 0.1))
    """Weight of the KL penalty to the reference policy in the loss (recommended 0.01-0.1; 0 = off)."""
    kl_estimator: str = _field("k3", choices=KL_ESTIMATORS)
    """Per-token KL estimator (Schulman): k1 = log ratio, k2 = squared log ratio / 2, k3 = unbiased low-variance."""
    clip_range: float = _field(0.2, gt=0.0, lt=1.0, recommended=(0.1, 0.3))
    """PPO clip epsilon: the ratio is clipped to [1 - clip_range, 1 + clip_range] (recommended 0.1-0.3)."""
    clip_range_high: float | None = _field(None, gt=0.0, lt=10.0)
    """Upper epsilon for clip-higher (DAPO), e.g. 0.28; must exceed clip_range; null = symmetric."""
    dual_clip: float | None = _field(None, gt=1.0)
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens; null = off."""
    epochs_per_batch: int = _field(1, ge=1, le=16)
    """Passes of PPO updates over each step's rollouts."""
    minibatch_size: int | None = _field(None, ge=1, le=MAX_BATCH)
    """Candidates per optimizer step; null = the whole step's batch (one optimizer step per epoch)."""
    micro_batch_size: int = _field(32, ge=1, le=MAX_BATCH)
    """Candidates per forward/backward (gradient accumulation); only affects memory, never the result."""
    max_grad_norm: float | None = _field(1.0, gt=0.0)
    """Clip the global gradient norm to this; null = no clipping."""
    advantage: str = _field("grpo", choices=ADVANTAGE_ESTIMATORS)
    """Advantage estimator: grpo (group mean/std), rloo (leave-one-out), dr_grpo (group mean, no std)."""
    loss_aggregation: str = _field("token_mean", choices=LOSS_AGGREGATIONS)
    """token_mean: average over all tokens of the batch; seq_mean: average per sequence, then over sequences."""
    drop_zero_variance_groups: bool = False
    """Leave out groups whose candidates all got the same reward (no learning signal); sampling.dynamic also
    draws more problems to fill the batch."""
    weight_decay: float = _field(0.0, ge=0.0, le=1.0)
    """AdamW weight decay."""
    tis_cap: float | None = _field(2.0, ge=1.0, le=100.0)
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
class ScheduleConfig(_Section):
    """Learning-rate and KL-coefficient schedule ("stable first, then faster" warm-up)."""

    warmup: str = _field("none", choices=WARMUPS)
    """none: constant lr and KL from step 0; stable_then_fast: start with a low lr and a strong KL, then ramp to the configured values."""
    warmup_steps: int = _field(10, ge=0, le=MAX_STEPS)
    """Steps over which the learning rate rises linearly from lr_start_factor * learning_rate to learning_rate."""
    lr_start_factor: float = _field(0.1, ge=0.0, le=1.0)
    """Fraction of the learning rate used at step 0 of a stable_then_fast warm-up."""
    kl_warmup_steps: int | None = _field(None, ge=0, le=MAX_STEPS)
    """Steps over which the KL coefficient eases from kl_start_factor * kl_coef to kl_coef; null = warmup_steps."""
    kl_start_factor: float = _field(2.0, ge=1.0, le=100.0)
    """Multiple of kl_coef applied at step 0 of a stable_then_fast warm-up (a stronger anchor early)."""
    lr_decay: str = _field("constant", choices=LR_DECAYS)
    """Learning rate after warm-up: constant, or linear / cosine decay to min_lr_factor at the last step."""
    min_lr_factor: float = _field(0.0, ge=0.0, le=1.0)
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
class TrainConfig(_Section):
    """Run length, seed, evaluation and checkpoint cadence."""

    steps: int = _field(60, ge=1, le=MAX_STEPS)
    """Number of RL steps (each: sample, execute, reward, update)."""
    seed: int = _field(0, ge=0, le=INT32_MAX)
    """Seed for problem order, sampling and initialisation."""
    eval_every: int = _field(10, ge=0, le=MAX_STEPS)
    """Evaluate on the heldout split every this many steps (also at step 0 and at the end); 0 = only start and end."""
    eval_samples: int = _field(8, ge=1, le=1024)
    """Completions sampled per held-out problem for pass@k."""
    checkpoint_every: int = _field(20, ge=0, le=MAX_STEPS)
    """Save a resumable checkpoint every this many steps (always at the end); 0 = only at the end."""
    save_merged: bool = False
    """Also export a merged model (base + LoRA, safetensors) with the final checkpoint."""


@dataclass(frozen=True)
class SandboxConfig(_Section):
    """Where and how candidates are executed."""

    backend: str = _field("process", max_length=64)
    """Execution backend of the sandbox (see `python -m sandbox run --help`)."""
    workers: int = _field(2, ge=1, le=256)
    """Parallel executions."""
    timeout_s: float | None = _field(None, gt=0.0, le=600.0)
    """Time limit per execution in seconds; null = each problem's own time_limit_s."""
    memory_mb: int | None = _field(None, ge=16, le=16384)
    """Memory limit per execution in MiB; null = each problem's own memory_limit_mb."""
    mode: str = _field("warm", choices=SANDBOX_MODES)
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
class VLLMConfig(_Section):
    """The vLLM server that samples when sampling.engine is vllm."""

    url: str | None = _field(None, max_length=2048)
    """A running vLLM OpenAI-compatible server (http://host:port) that serves the run's base model with LoRA
    enabled; null = the trainer starts one for the run from the engine environment and stops it with the run."""
    gpu_memory_utilization: float = _field(0.4, gt=0.0, le=0.95)
    """Share of the GPU's memory the server may take (the rest is the trainer's, on the same GPU)."""
    max_model_len: int | None = _field(None, ge=16, le=1_048_576)
    """Longest prompt + completion in tokens; null = prompt budget + max_new_tokens rounded up (or the model's)."""
    tensor_parallel_size: int = _field(1, ge=1, le=64)
    """GPUs the server splits the model over."""
    dtype: str = _field("auto", choices=VLLM_DTYPES)
    """The server's weights and activations; auto = bfloat16 (vLLM's CPU kernels need it; half the memory on GPU)."""
    sync: str = _field("auto", choices=VLLM_SYNCS)
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
class DifficultyConfig(_Section):
    """Train problems left out at launch by the pass rates of a difficulty probe (`python -m training probe`)."""

    probe: str | None = _field(None, max_length=MAX_PATH)
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
class FeedbackConfig(_Section):
    """What the model is told after a failing turn (sampling.turns > 1): the sandbox's answer, never the solution."""

    tests_shown: int = _field(3, ge=0, le=100)
    """Failing tests described per feedback message (function problems: the test's text and error; stdio: which
    case failed and how, never a hidden case's expected output)."""
    stderr_chars: int = _field(2000, ge=0, le=100_000)
    """Characters of the end of the program's stderr (the traceback) shown; 0 = none."""
    include_code: bool = False
    """Repeat the failing code in the feedback message (it is already in the conversation as the model's reply)."""


@dataclass(frozen=True)
class MonitorConfig(_Section):
    """Divergence warnings: bounds on each step's metrics; a run past one gets a warning (once per condition) on
    its page and in its done event, and goes on."""

    kl_max: float | None = _field(10.0, gt=0.0)
    """Warn when a step's KL to the reference (metric kl, nats/token) exceeds this or is not finite; null = never.
    The repair benchmark's runs (benchmarks/RESULTS.md) ended under 0.5."""
    loss_max: float | None = _field(10.0, gt=0.0)
    """Warn when a step's |loss/policy + loss/kl| exceeds this or is not finite; null = never."""
    flat_reward_steps: int | None = _field(10, ge=2, le=MAX_STEPS)
    """Warn when this many steps in a row had no candidate passing every test and a flat reward/mean
    (within flat_reward_tol): the run learns nothing; null = never."""
    flat_reward_tol: float = _field(0.01, ge=0.0, le=1.0)
    """How much reward/mean may move (max - min over those steps) and still count as flat."""


@dataclass(frozen=True)
class RunConfig(_Section):
    """A whole training run."""

    model: ModelConfig = _field(factory=ModelConfig)
    """The policy model and how it is trained (LoRA or full)."""
    problems: str = _field("data/demo/problems.jsonl", max_length=MAX_PATH)
    """Problem file (native JSONL, HumanEval, MBPP, APPS, CodeContests; .jsonl or .jsonl.gz)."""
    sampling: SamplingConfig = _field(factory=SamplingConfig)
    """How candidates are sampled."""
    reward: RewardConfig = _field(factory=RewardConfig)
    """How execution results become rewards."""
    ppo: PPOConfig = _field(factory=PPOConfig)
    """Policy optimisation hyperparameters."""
    schedule: ScheduleConfig = _field(factory=ScheduleConfig)
    """Learning-rate and KL schedule."""
    train: TrainConfig = _field(factory=TrainConfig)
    """Length of the run, evaluation and checkpoint cadence."""
    sandbox: SandboxConfig = _field(factory=SandboxConfig)
    """Where and how candidates run."""
    difficulty: DifficultyConfig = _field(factory=DifficultyConfig)
    """Train problems left out at launch by a difficulty probe's pass rates (held-out problems never are)."""
    vllm: VLLMConfig = _field(factory=VLLMConfig)
    """The vLLM server, when sampling.engine is vllm."""
    feedback: FeedbackConfig = _field(factory=FeedbackConfig)
    """What the model is told after a failing turn, when sampling.turns > 1."""
    monitor: MonitorConfig = _field(factory=MonitorConfig)
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
            ScheduleConfig, TrainConfig, SandboxConfig, VLLMConfig, DifficultyConfig, FeedbackConfig, MonitorConfig,
            RunConfig)


# --------------------------------------------------------------------------------------------------
# Types and docstrings
# --------------------------------------------------------------------------------------------------


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _describe(tp: Any) -> str:
    args = _union_args(tp)
    if args:
        return " or ".join(_describe(a) for a in args)
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is tuple:
        return "a list of strings"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def _matches(value: Any, tp: Any) -> bool:
    args = _union_args(tp)
    if args:
        return any(_matches(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if typing.get_origin(tp) is tuple:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    if dataclasses.is_dataclass(tp):
        return isinstance(value, tp)
    return isinstance(value, tp)


def _check_type(value: Any, tp: Any, name: str) -> None:
    if not _matches(value, tp):
        raise ConfigError(name, f"must be {_describe(tp)}; got {value!r} ({type(value).__name__})")


@functools.cache
def field_docs() -> dict[str, dict[str, str]]:
    """``{ClassName: {field: docstring}}`` read from this module's source (the line under each field)."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(field_docs)))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str] = {}
        for prev, cur in zip(node.body, node.body[1:]):
            if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name)
                    and isinstance(cur, ast.Expr) and isinstance(cur.value, ast.Constant)
                    and isinstance(cur.value.value, str)):
                fields[prev.target.id] = inspect.cleandoc(cur.value.value)
        docs[node.name] = fields
    return docs


# --------------------------------------------------------------------------------------------------
# dict <-> dataclasses
# --------------------------------------------------------------------------------------------------


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Convert a YAML/JSON value to the field type ``tp``; ConfigError naming ``path`` otherwise."""
    args = _union_args(tp)
    if args:
        if value is None and type(None) in args:
            return None
        errors = []
        for a in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, a, path)
            except ConfigError as e:
                errors.append((a, e))
        # The branch of the value's own shape knows best what is wrong with it (a list's bad entry).
        shaped = [e for a, e in errors if _same_shape(value, a)]
        if len(errors) == 1 or len(shaped) == 1:
            raise (shaped or [errors[0][1]])[0]
        raise ConfigError(path, f"must be {_describe(tp)}; got {value!r}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if value is None:
            return _from_dict(tp, {}, path)
        if not isinstance(value, dict):
            raise ConfigError(path, f"must be a mapping of {', '.join(f.name for f in dataclasses.fields(tp))}; "
                                    f"got {value!r}")
        return _from_dict(tp, value, path)
    if isinstance(value, LostNumber):  # a number no float holds: whatever the field, not what was written
        raise ConfigError(path, lost_number_message(value) if tp is float else
                          f"must be {_describe(tp)}; got the number {value}")
    if typing.get_origin(tp) is tuple:
        if isinstance(value, str):  # a single string where a list is expected: almost always a slip
            raise ConfigError(path, f"must be a list of strings; got the string {value!r} (write [{value!r}])")
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and not isinstance(v, LostNumber)
                                                            for v in value):
            raise ConfigError(path, f"must be a list of strings; got {value!r}")
        return tuple(_check_text(v, path) for v in value)
    if tp is float:
        # PyYAML reads `2e-6` (no dot) as a string; accept numeric strings rather than fail on a YAML quirk.
        if isinstance(value, str):
            try:
                number = json_number(value.strip())
            except ValueError:
                pass
            else:
                if isinstance(number, LostNumber):
                    raise ConfigError(path, lost_number_message(number))
                return number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"must be a number; got {value!r}")
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits: past any float
            raise ConfigError(path, f"must be a finite number; got an integer of {len(str(abs(value)))} digits") from None
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"must be an integer; got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"must be true or false; got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"must be a string; got {value!r}")
        return _check_text(value, path)
    raise TypeError(f"unsupported config type {tp!r} at {path}")


def _same_shape(value: Any, tp: Any) -> bool:
    if typing.get_origin(tp) is tuple:
        return isinstance(value, (list, tuple))
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return tp is str and isinstance(value, str)


def upgrade_reward(data: dict) -> dict:
    """Saved configs from before reward.normalize took ``sum | per_component`` hold it as a boolean: the
    weighted mean (true) or the plain weighted sum (false), which is now reward.weighted_mean. The boolean
    wins over a weighted_mean beside it: the web app merges a request over the defaults, which always hold
    one, so an old client's ``normalize: false`` must not lose to the default."""
    legacy = data.get("normalize")
    if not isinstance(legacy, bool):
        return data
    return {**data, "normalize": "sum", "weighted_mean": legacy}


_UPGRADES = {RewardConfig: upgrade_reward}
"""Per section: how an older spelling of its keys becomes today's (saved runs keep loading)."""


def _from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    if cls in _UPGRADES:
        data = _UPGRADES[cls](data)
    names = [f.name for f in dataclasses.fields(cls)]
    hints = _hints(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(key, str):
            _check_text(key, path)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(path, f"unknown key; {hint}valid keys{' in ' + prefix if prefix else ''}: "
                                    f"{', '.join(names)}")
        kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise e.prefixed(prefix) if prefix else e


def config_from_dict(data: dict | None) -> RunConfig:
    """Build a validated RunConfig; missing keys take their defaults. Raises ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("", f"the config must be a mapping of sections (model, sampling, ppo, ...); got {data!r}")
    return _from_dict(RunConfig, data)


def leaf_fields() -> dict[str, dataclasses.Field]:
    """Every leaf field of RunConfig by dotted name (``train.steps``), sections descended into."""
    out: dict[str, dataclasses.Field] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            section = next((a for a in (_union_args(tp) or (tp,)) if dataclasses.is_dataclass(a)), None)
            if section is not None:
                walk(section, f"{prefix}{f.name}.")
            else:
                out[f"{prefix}{f.name}"] = f

    walk(RunConfig, "")
    return out


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
        node: Any = cfg
        for part in dotted.split("."):
            node = None if node is None else getattr(node, part)
        if node is not None and not isinstance(node, bool) and node > ceiling:
            raise ConfigError(dotted, f"must be <= {ceiling} on this server (its limit); got {node!r}")


def config_to_dict(cfg: Any) -> dict:
    """Plain dict (lists, not tuples) that ``config_from_dict`` turns back into an equal config."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


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

    Path(path).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False), encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# JSON Schema
# --------------------------------------------------------------------------------------------------


def _type_schema(tp: Any, ceilings: typing.Mapping[str, float] | None = None, prefix: str = "") -> dict:
    args = _union_args(tp)
    if args:
        non_null = [a for a in args if a is not type(None)]
        nullable = len(non_null) < len(args)
        if len(non_null) == 1 and not dataclasses.is_dataclass(non_null[0]) \
                and typing.get_origin(non_null[0]) is not tuple:
            s = _type_schema(non_null[0])
            s["type"] = [s["type"], "null"] if nullable else s["type"]
            return s
        return {"anyOf": [_type_schema(a, ceilings, prefix) for a in non_null]
                + ([{"type": "null"}] if nullable else [])}
    if tp is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(tp):
        return _section_schema(tp, ceilings, prefix)
    if typing.get_origin(tp) is tuple:
        return {"type": "array", "items": {"type": "string"}}
    return {"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[tp]}


def _length_schema(s: dict, m: typing.Mapping) -> None:
    """``max_length`` / ``max_items`` onto every string and array branch of a field's schema."""
    for branch in s.get("anyOf", [s]):
        if branch.get("type") in ("string", ["string", "null"]) and "max_length" in m:
            branch["maxLength"] = m["max_length"]
        if branch.get("type") == "array":
            if "max_items" in m:
                branch["maxItems"] = m["max_items"]
            if "max_length" in m:
                branch["items"]["maxLength"] = m["max_length"]


def _section_schema(cls: type, ceilings: typing.Mapping[str, float] | None = None, prefix: str = "") -> dict:
    docs = field_docs().get(cls.__name__, {})
    hints = _hints(cls)
    props = {}
    for f in dataclasses.fields(cls):
        s = _type_schema(hints[f.name], ceilings, f"{prefix}{f.name}.")
        m = f.metadata
        bounds = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
        target = s
        if "anyOf" in s:  # put numeric bounds / enums on the non-null branch
            target = next((b for b in s["anyOf"] if b.get("type") != "null"), s)
        for k, name in bounds.items():
            if k in m:
                target[name] = m[k]
        ceiling = (ceilings or {}).get(f"{prefix}{f.name}")
        if ceiling is not None and ceiling < target.get("maximum", math.inf) \
                and ceiling < target.get("exclusiveMaximum", math.inf):
            target.pop("exclusiveMaximum", None)
            target["maximum"] = ceiling
        if "choices" in m:
            (target["items"] if target.get("type") == "array" else target)["enum"] = list(m["choices"])
        _length_schema(s, m)
        if "recommended" in m:
            s["x-recommended"] = {"minimum": m["recommended"][0], "maximum": m["recommended"][1]}
        if "below" in m:
            s["x-below-minimum"] = m["below"]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        s["default"] = config_to_dict(default)
        s["description"] = docs.get(f.name, "")
        s["title"] = f.name.replace("_", " ")
        props[f.name] = s
    return {"type": "object", "title": cls.__name__, "description": inspect.getdoc(cls).splitlines()[0],
            "properties": props, "additionalProperties": False}


def json_schema(ceilings: typing.Mapping[str, float] | None = None) -> dict:
    """JSON Schema (draft 2020-12) of the whole RunConfig: types, defaults, bounds, enums, descriptions.

    ``ceilings`` (a deployment's limits, see ``check_ceilings``) lower the fields' maximums.
    """
    schema = _section_schema(RunConfig, ceilings)
    schema["description"] = "Crucible training run configuration (YAML keys = these property names)."
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://crucible.local/schemas/run-config.json", **schema}
