"""The policy: a Hugging Face causal LM (+ tokenizer), LoRA-wrapped, and its reference.

With LoRA the reference policy is the *same* module with its adapters switched off
(``with model.disable_adapter():``), so a 9B model costs one copy of the weights, not two. With a full
fine-tune (``model.lora: null``) there is nothing to switch off, so a frozen copy of the initial
weights is kept as the reference: twice the weight memory, which is the price of full fine-tuning
with a KL anchor (set ``ppo.kl_coef: 0`` to skip the copy).

``sequence_logprobs`` is the one forward pass used for old, reference and new log-probabilities, so
they are computed identically and the PPO ratio is exactly 1 where the policy has not moved. Where the
model allows it the trainer uses ``shared_prompt_logprobs`` instead, for all three alike: each distinct
prompt of a micro-batch runs once and its candidates continue from its KV cache, short completions
packed into shared rows. Under ``fused_lora`` (float32) each adapted linear layer computes with
``W + scaling * B @ A`` in one matmul, and its backward forms the adapter gradients through the
rank-r factors rather than the full weight gradient. Both give the same log-probabilities and
gradients up to float rounding (tests/training/test_policy.py).
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from training.losses import entropy_from_logits, selective_logprobs

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(ValueError):
    """The model or tokenizer at ``model.name_or_path`` could not be loaded."""


@dataclass
class Policy:
    model: torch.nn.Module
    """The trainable model: a ``PeftModel`` with LoRA, else the full model."""
    tokenizer: Any
    """Its tokenizer, left-padding (batched generation needs the prompts right-aligned)."""
    ref_model: torch.nn.Module | None = None
    """Frozen copy of the initial weights for a full fine-tune; None with LoRA (adapters disabled instead)."""
    is_lora: bool = True

    @contextlib.contextmanager
    def reference(self, model: torch.nn.Module | None = None) -> Iterator[torch.nn.Module]:
        """Context in which the yielded module computes the reference policy.

        ``model`` is the (possibly accelerate-wrapped) trainable model to use; defaults to ``self.model``.
        """
        model = self.model if model is None else model
        if self.ref_model is not None:
            yield self.ref_model
            return
        peft_model = _unwrap(model)
        with peft_model.disable_adapter():
            yield model

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


@contextlib.contextmanager
def generation_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Eval mode for sampling, each LoRA layer folded into a merged copy of its weight where memory allows.

    Unfolded, every adapted linear layer costs three matmuls per decoding step instead of one, and
    decoding is a long chain of small matmuls (and, on a GPU, kernel launches). Folding writes
    ``W + scaling * B @ A`` into a buffer beside ``W`` (kept between rollouts, so a captured CUDA graph
    keeps its addresses) and points the layer's forward at it; the trainer's weights are never
    written, so after the rollout they are bit-identical to before in every dtype (in-place
    merge/unmerge would round bf16 weights by ~1e-3 per rollout). The copy costs the adapted weights'
    size once: it is made only when that fits twice over in free memory (``lora_sampling``), else
    the layers sample unfolded. Restores train mode afterwards.
    """
    peft_model = _unwrap(model)
    was_training = model.training
    model.eval()
    folded = _fold_lora(peft_model)
    peft_model.__dict__["_crucible_lora_sampling"] = "merged" if folded else "adapter"
    try:
        yield peft_model
    finally:
        for module in folded:
            del module.forward
        model.train(was_training)


def lora_sampling(model: torch.nn.Module) -> str | None:
    """How the last rollout sampled the adapters: ``merged`` (folded copies), ``adapter``, None (no LoRA / no
    rollout yet). ``start.runtime.sampling.lora`` before the first rollout: what memory allows now."""
    peft_model = _unwrap(model)
    seen = peft_model.__dict__.get("_crucible_lora_sampling")
    if seen is not None:
        return seen
    layers = _foldable_layers(peft_model)
    if not layers:
        return None
    return "merged" if _fits(layers) else "adapter"


def _foldable_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """PEFT LoRA ``Linear`` layers with a plain ``nn.Linear`` base and one active vanilla adapter."""
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:
        return []
    layers = []
    for module in model.modules():
        if type(module) is not LoraLinear or "forward" in module.__dict__ or module.merged or module.disable_adapters:
            continue
        active = [a for a in module.active_adapters if a in module.lora_A]
        if (len(active) != 1 or type(module.base_layer) is not torch.nn.Linear
                or getattr(module, "fan_in_fan_out", False) or active[0] in getattr(module, "lora_variant", {})
                or getattr(module, "lora_bias", {}).get(active[0], False)):
            return []  # fold all or none: a half-folded model is two kinds of sampler
        layers.append(module)
    return layers


def _fits(layers: list[torch.nn.Module]) -> bool:
    """Whether copies of ``layers``' weights (those not copied yet) fit twice over in free memory."""
    need = sum(m.base_layer.weight.numel() * m.base_layer.weight.element_size()
               for m in layers if "_crucible_folded" not in m.__dict__)
    if need == 0:
        return True
    device = layers[0].base_layer.weight.device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    else:
        free = _available_host_memory()
    return free >= 2 * need


def _available_host_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _fold_lora(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Point every foldable LoRA layer of ``model`` at ``W + scaling * B @ A`` in a buffer of its own
    (``generation_mode``). -> the layers patched (``del layer.forward`` restores PEFT's forward); [] when the
    copies do not fit in memory or a layer cannot be folded."""
    layers = _foldable_layers(model)
    if not layers or not _fits(layers):
        return []
    with torch.no_grad():
        for module in layers:
            weight = module.base_layer.weight
            folded = module.__dict__.get("_crucible_folded")
            if folded is None or folded.shape != weight.shape or folded.dtype != weight.dtype:
                folded = torch.empty_like(weight)
                module.__dict__["_crucible_folded"] = folded  # a plain attribute: not a parameter, not saved
            adapter = next(a for a in module.active_adapters if a in module.lora_A)
            folded.copy_(weight)
            folded.add_(module.get_delta_weight(adapter).to(weight.dtype))  # (out, in)
            object.__setattr__(module, "forward", _FoldedLinear(folded, module.base_layer.bias))
    return layers


class _FoldedLinear:
    """A folded layer's forward: one matmul with the merged copy."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)


@contextlib.contextmanager
def fused_lora(model: torch.nn.Module) -> Iterator[int]:
    """Training forward of float32 LoRA linears as one matmul with ``W + scaling * B @ A``.

    PEFT computes ``x W^T + scaling * (x A^T) B^T``: two extra thin matmuls, a scale and an add over
    the activations in the forward and twice that in the backward, memory-bound work that costs more
    than the base matmul on CPU. The reparametrised forward is the same function of ``x``, ``A`` and
    ``B`` (autograd gives ``dA = scaling B^T dW``, ``dB = scaling dW A^T`` with ``dW = G^T x``: the
    same gradients up to float rounding, tested), with one well-shaped weight-gradient matmul
    instead. Applies only where it is exact enough and cheap: a plain ``nn.Linear`` base layer with
    one active vanilla adapter (no DoRA / LoRA bias / fan_in_fan_out), no dropout, float32 weights
    (in bfloat16 the small ``B @ A`` would be rounded away), and re-checked at every call, so that
    ``disable_adapter()`` (the reference policy) inside the context still runs the base layer.
    Yields the number of layers patched; restores PEFT's forward on exit.
    """
    patched = []
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # no peft: nothing to fuse
        yield 0
        return
    for module in _unwrap(model).modules():
        if type(module) is LoraLinear and "forward" not in module.__dict__ and _fusable(module):
            module.forward = _FusedForward(module)
            patched.append(module)
    try:
        yield len(patched)
    finally:
        for module in patched:
            del module.forward


def _fusable(module: Any) -> bool:
    """Static conditions of ``fused_lora`` for one PEFT LoRA ``Linear`` (see there)."""
    base = module.base_layer
    if type(base) is not torch.nn.Linear or getattr(module, "fan_in_fan_out", False):
        return False
    if base.weight.dtype != torch.float32:
        return False
    for name in module.lora_A:
        dropout = module.lora_dropout[name]
        if not (isinstance(dropout, torch.nn.Identity) or (isinstance(dropout, torch.nn.Dropout) and dropout.p == 0)):
            return False
        if name in getattr(module, "lora_variant", {}) or getattr(module, "lora_bias", {}).get(name, False):
            return False
        if module.lora_A[name].weight.dtype != torch.float32 or module.lora_B[name].weight.dtype != torch.float32:
            return False
    return True


class _FusedForward:
    """``fused_lora``'s forward of one layer; anything unusual goes to PEFT's own forward."""

    def __init__(self, module: Any):
        self.module = module

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        m = self.module
        active = [a for a in m.active_adapters if a in m.lora_A]
        if args or kwargs or m.merged or m.disable_adapters or len(active) != 1 or x.dtype != torch.float32:
            return type(m).forward(m, x, *args, **kwargs)
        a = active[0]
        base = m.base_layer
        lora_a, lora_b = m.lora_A[a].weight, m.lora_B[a].weight  # (r, in), (out, r)
        if torch.is_grad_enabled() and (lora_a.requires_grad or lora_b.requires_grad) and not base.weight.requires_grad:
            return _FusedLoraLinear.apply(x, base.weight, base.bias, lora_a, lora_b, float(m.scaling[a]))
        weight = torch.addmm(base.weight, lora_b, lora_a, alpha=m.scaling[a])  # (out, in)
        return torch.nn.functional.linear(x, weight, base.bias)


class _FusedLoraLinear(torch.autograd.Function):
    """``x (W + s B A)^T + bias`` in one forward matmul, with the adapter gradients of the backward
    computed through the rank-``r`` factors: ``dB = s G^T (x A^T)``, ``dA = s (G B)^T x`` (``G`` the
    output gradient). Autograd through ``linear(x, W + s B A)`` would first form the full
    ``dW = G^T x`` (tokens x out x in multiply-adds) and project it; these thin products cost
    ``2 r (in + out) / (in out)`` of that (a quarter to a sixth at r = 8 on a 128-wide model). Same
    function, same gradients up to float rounding (tested). The frozen base weight and bias get none.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
        fused = torch.addmm(weight, lora_b, lora_a, alpha=scaling)  # (out, in)
        ctx.save_for_backward(x, fused, lora_a, lora_b)
        ctx.scaling = scaling
        return torch.nn.functional.linear(x, fused, bias)  # (..., out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, fused, lora_a, lora_b = ctx.saved_tensors
        s = ctx.scaling
        g2 = grad.reshape(-1, grad.shape[-1])  # (T, out)
        x2 = x.reshape(-1, x.shape[-1])  # (T, in)
        dx = da = db = None
        if ctx.needs_input_grad[0]:
            dx = grad.matmul(fused)  # (..., in)
        # Products laid out so that the long token dimension is the inner one of a (r, T) operand:
        # (out, T) @ (T, r) or (T, out) @ (out, r) run several times slower on CPU BLAS.
        if ctx.needs_input_grad[4]:
            u = x2.mm(lora_a.t())  # (T, r)
            db = u.t().mm(g2).mul_(s).t().contiguous()  # (out, r)
        if ctx.needs_input_grad[3]:
            da = lora_b.t().mm(g2.t()).mm(x2).mul_(s)  # (r, T) @ (T, in) -> (r, in)
        return dx, None, None, da, db, None


def torch_dtype(name: str) -> torch.dtype | str:
    """``float32`` / ``bfloat16`` / ``float16`` -> torch dtype; ``auto`` stays ``"auto"``."""
    if name == "auto":
        return "auto"
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"model.dtype: unknown dtype {name!r}; valid: {', '.join([*_DTYPES, 'auto'])}") from None


def load_tokenizer(name_or_path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as e:
        raise ModelLoadError(_load_message(name_or_path, "tokenizer", e)) from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        # Generation needs a pad token; EOS is the conventional stand-in (masked out everywhere).
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(model_config: Any, *, device: torch.device | str | None = None, kl_coef: float = 1.0) -> Policy:
    """Load base model + tokenizer, wrap with LoRA (or keep a frozen reference for a full fine-tune).

    ``model_config`` is a ``ModelConfig``. ``kl_coef == 0`` with a full fine-tune skips the reference
    copy (nothing would use it).
    """
    from transformers import AutoModelForCausalLM

    from training import kernels
    from training.runtime import cpu_float_mode

    # Known-bad kernel combinations are routed around or refused (KernelRefused) before anything loads.
    kernels.preflight(device if device is not None else "cpu")
    cpu_float_mode()  # before torch's first thread pool: its workers inherit the mode
    name = model_config.name_or_path
    tokenizer = load_tokenizer(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype(model_config.dtype))
    except (OSError, ValueError) as e:
        raise ModelLoadError(_load_message(name, "model", e)) from None
    kernels.apply(model)  # the model's own modeling module, where it is not one the preflight knew
    for adapter in model_config.adapters:
        model = merge_adapter(model, adapter)
    if device is not None:
        model.to(device)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if model_config.gradient_checkpointing:
        enable_gradient_checkpointing(model)

    lora = model_config.lora
    if lora is None:
        ref = None
        if kl_coef > 0:
            ref = copy.deepcopy(model).eval()
            ref.requires_grad_(False)
        model.train()
        return Policy(model=model, tokenizer=tokenizer, ref_model=ref, is_lora=False)

    from peft import LoraConfig, get_peft_model

    targets = lora.target_modules
    peft_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft still queries the deprecated transformers-4 name (is_gradient_checkpointing)
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(model, peft_config)
    if model_config.gradient_checkpointing:
        # With frozen embeddings nothing upstream of the checkpointed blocks requires grad, and
        # non-reentrant checkpointing would then produce no adapter gradients.
        model.enable_input_require_grads()
    model.train()
    return Policy(model=model, tokenizer=tokenizer, ref_model=None, is_lora=True)


def merge_adapter(model: torch.nn.Module, adapter_dir: str) -> torch.nn.Module:
    """``model`` with the PEFT adapter at ``adapter_dir`` folded into its weights (a plain model again)."""
    from peft import PeftModel

    try:
        peft_model = PeftModel.from_pretrained(model, adapter_dir)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"model.adapters: cannot load the adapter from {adapter_dir!r}: {first}") from None
    return peft_model.merge_and_unload()


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The policy's weights under its base model's checkpoint names, every active LoRA adapter folded in
    (``W + scaling * B @ A``, computed in float32), cast to ``dtype``: what an engine that loads whole
    weights needs (``vllm.sync: weights``). ``model`` itself is not changed (nothing is merged in place, so
    the trainer keeps training the adapter). Weights tied to an earlier one (the output embedding of a
    model with tied embeddings) are left out, as ``save_pretrained`` leaves them out.
    -> {checkpoint name: tensor}"""
    try:
        from peft.tuners.lora.layer import LoraLayer
    except ImportError:  # no peft: no adapter to fold in
        LoraLayer = ()
    base = _base(_unwrap(model))
    deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if not isinstance(module, LoraLayer) or module.merged or module.disable_adapters:
            continue
        for adapter in module.active_adapters:
            if adapter not in module.lora_A:
                continue
            if module.use_dora.get(adapter):
                raise ValueError(f"{name}: a DoRA adapter is not a weight delta; it cannot be merged for the engine")
            delta = module.get_delta_weight(adapter).float()  # (out, in)
            key = f"{name}.weight"
            deltas[key] = deltas[key] + delta if key in deltas else delta
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple] = set()
    for key, tensor in base.state_dict().items():
        if ".lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        if tensor.numel():
            where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
            if where in seen:  # tied to a weight already written
                continue
            seen.add(where)
        if name in deltas:
            tensor = tensor.float() + deltas.pop(name)
        out[name] = (tensor if dtype is None else tensor.to(dtype)).detach().contiguous()
    if deltas:  # an adapter on a weight the state dict does not name: refuse rather than drop it silently
        raise ValueError(f"LoRA deltas with no base weight to fold into: {sorted(deltas)[:5]}")
    return out


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Turn on activation checkpointing under its transformers-5 name, falling back to the old one."""
    kwargs = {"use_reentrant": False}
    with warnings.catch_warnings():
        # transformers 5 renamed gradient_checkpointing_* to activation_checkpointing_* and warns on
        # the old name; we call the new one when it exists and silence the deprecation otherwise.
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # the KV cache is useless (and warned about) in checkpointed training


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_len: int,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the completion tokens under ``model`` (and their entropy, as a metric).

    ``input_ids`` is ``[left-padded prompt | right-padded completion]``; the last ``completion_len``
    columns are the completion. Positions come from the attention mask (as in ``generate``), so left
    padding does not shift them. Logits are divided by the sampling temperature: the policy being
    optimised is the distribution the candidates were sampled from. Only the completion's logits are
    computed (``logits_to_keep``).

    input_ids, attention_mask: (B, L) -> logprobs (B, C), entropy (B, C) or None; C = completion_len
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=completion_len + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :]  # (B, C, V): position t predicts completion token t
    if temperature and temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, -completion_len:]  # (B, C)
    logprobs = selective_logprobs(logits, targets)  # (B, C)
    entropy = entropy_from_logits(logits) if with_entropy else None  # (B, C)
    return logprobs, entropy


def shared_prompt_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    group_index: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    pack: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` for sequences that share prompts: each distinct prompt runs once.

    GRPO samples K completions per prompt, so a micro-batch holds few distinct prompts. The prompts
    (``G`` rows) go through the model once with a KV cache; the cache rows are then gathered for the
    ``B`` sequences (``group_index``: the prompt row of each sequence, a differentiable index, so the
    gradient of every candidate flows back into its prompt's forward) and the completions run on top
    of it. Same log-probabilities as the per-sequence forward up to float rounding (tested), for
    ``1 + C / P`` times fewer prompt tokens. Needs a model whose forward takes a KV cache
    (``shared_prompts_supported``).

    With ``pack`` (when it saves at least a tenth of the rows), short completions of the same prompt
    share a row of the completion forward: ``[prompt | completion a | completion b]`` with a block
    mask (``b`` sees the prompt and itself, never ``a``) and positions restarting after the prompt, so
    that padding up to the longest completion is not computed. Each completion still sees exactly
    its own prompt and its own earlier tokens: the same log-probabilities (tested).

    prompt_ids, prompt_mask: (G, P) left-padded; group_index: (B,) in [0, G);
    completion_ids, completion_mask: (B, C) right-padded -> logprobs (B, C), entropy (B, C) or None
    """
    from transformers import DynamicCache

    from training.generation import _cache_kwarg, select_cache_rows

    inner = _unwrap(model)
    cache_kwarg = _cache_kwarg(inner)
    prompt_pos = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)  # (G, P)
    cache = DynamicCache(config=inner.config)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=prompt_pos, use_cache=True,
                logits_to_keep=1, **{cache_kwarg: cache})
    first = out.logits[:, -1:, :][group_index]  # (B, 1, V): the last prompt position predicts token 0
    c = completion_ids.shape[1]
    if _continue_linear_state(cache):
        pack = False  # a recurrent state would run from one packed completion into the next
    plan = _pack_plan(completion_mask, group_index, c - 1) if pack and c > 1 else None
    if plan is not None:
        _, row_group, src, positions, seg, gather = plan
        inputs = completion_ids.reshape(-1)[src.clamp(min=0)]  # (R, C - 1); padding feeds any token
        select_cache_rows(cache, row_group)  # (G, ...) -> (R, ...) rows, differentiable
        start = prompt_mask.long().sum(-1)[row_group]  # (R,)
        q = inputs.shape[1]
        causal = torch.ones(q, q, dtype=torch.bool, device=seg.device).tril()  # (Q, Q)
        same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] >= 0) & causal  # (R, Q, Q)
        allowed = torch.cat([prompt_mask[row_group].bool()[:, None, :].expand(-1, q, -1), same], dim=-1)
        dtype = first.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=seg.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)[:, None]  # (R, 1, Q, P + Q) additive
        rest = model(input_ids=inputs, attention_mask=mask, position_ids=start[:, None] + positions,
                     use_cache=True, **{cache_kwarg: cache}).logits  # (R, Q, V)
        rest = rest.reshape(-1, rest.shape[-1])[gather]  # (B, C - 1, V)
        logits = torch.cat([first, rest], dim=1)  # (B, C, V)
    elif c > 1:
        select_cache_rows(cache, group_index)  # (G, ...) -> (B, ...) rows, differentiable
        inputs = completion_ids[:, :-1]  # (B, C - 1): token t predicts token t + 1
        mask = torch.cat([prompt_mask[group_index], completion_mask[:, :-1].to(prompt_mask.dtype)], dim=1)
        start = prompt_mask.long().sum(-1)[group_index]  # (B,) first completion position
        positions = start[:, None] + torch.arange(c - 1, device=start.device)[None, :]  # (B, C - 1)
        rest = model(input_ids=inputs, attention_mask=mask, position_ids=positions, use_cache=True,
                     **{cache_kwarg: cache}).logits  # (B, C - 1, V)
        logits = torch.cat([first, rest], dim=1)  # (B, C, V)
    else:
        logits = first
    del cache, out
    if temperature and temperature != 1.0:
        logits = logits / temperature
    logprobs = selective_logprobs(logits, completion_ids)  # (B, C)
    entropy = entropy_from_logits(logits) if with_entropy else None  # (B, C)
    return logprobs, entropy


def _continue_linear_state(cache: Any) -> bool:
    """Let the linear-attention layers of ``cache`` (Qwen3.5's gated delta rule) hand their prompt
    state to one continuation forward with autograd: their cache writes its new conv and recurrent
    states in place (``copy_``, kept for CUDA graphs), which would overwrite tensors the backward
    still needs; here they are returned and not stored (the cache is dropped after this forward).
    -> whether the cache holds linear-attention state."""
    from transformers.cache_utils import LinearAttentionLayer

    found = False
    for layer in cache.layers:
        if type(layer) is LinearAttentionLayer:
            layer.__class__ = _ScoringLinearLayer
            found = True
    return found


def _scoring_linear_layer_class() -> type:
    from transformers.cache_utils import LinearAttentionLayer

    class ScoringLinearLayer(LinearAttentionLayer):
        """A linear-attention cache layer that gives its prompt state to the next forward, out of place."""

        def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, **kwargs: Any) -> torch.Tensor:
            return torch.cat([self.conv_states[state_idx], conv_states], dim=-1)  # (B, D, K + T)

        def update_recurrent_state(self, recurrent_states: torch.Tensor, state_idx: int = 0,
                                   **kwargs: Any) -> torch.Tensor:
            return recurrent_states

    return ScoringLinearLayer


_ScoringLinearLayer = _scoring_linear_layer_class()


def _pack_plan(completion_mask: torch.Tensor, group_index: torch.Tensor, width: int
               ) -> tuple[list, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Rows of at most ``width`` input tokens, each holding completions of one prompt (first-fit
    decreasing per prompt). A completion of length L feeds its first L - 1 tokens (its last token is
    predicted, never fed). None when packing would save less than a tenth of the rows.

    -> rows [[(b, offset), ...], ...], row_group (R,), source (R, W) (flat index into the (B, W + 1)
    completion ids of each fed token, -1 on padding), local positions (R, W), segment id (R, W) (the
    sequence b, -1 on padding), gather index (B, W) into the flattened (R * W) positions
    """
    lengths = completion_mask.sum(-1).tolist()  # (B,)
    groups = group_index.tolist()
    order = sorted(range(len(lengths)), key=lambda b: (groups[b], -lengths[b]))
    rows: list[list[tuple[int, int]]] = []
    room: list[int] = []
    row_of_group: dict[int, list[int]] = {}
    for b in order:
        need = max(int(lengths[b]) - 1, 0)
        target = next((r for r in row_of_group.get(groups[b], []) if room[r] >= need), None)
        if target is None:
            target = len(rows)
            rows.append([])
            room.append(width)
            row_of_group.setdefault(groups[b], []).append(target)
        rows[target].append((b, width - room[target]))
        room[target] -= need
    if len(rows) > 0.9 * len(lengths):
        return None
    return rows, *_pack_tensors(rows, lengths, groups, width, completion_mask.device)


def _pack_tensors(rows: list, lengths: list, groups: list, width: int, device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r = len(rows)
    row_group = torch.tensor([groups[row[0][0]] for row in rows], dtype=torch.long)  # (R,)
    src = torch.full((r, width), -1, dtype=torch.long)  # (R, W) flat index b * width + t of the fed token
    positions = torch.zeros(r, width, dtype=torch.long)  # (R, W)
    seg = torch.full((r, width), -1, dtype=torch.long)  # (R, W)
    gather = torch.zeros(len(lengths), width, dtype=torch.long)  # (B, W)
    ar = torch.arange(width)
    for i, row in enumerate(rows):
        for b, offset in row:
            n = max(int(lengths[b]) - 1, 0)
            if n:
                src[i, offset:offset + n] = b * (width + 1) + ar[:n]
                positions[i, offset:offset + n] = ar[:n]
                seg[i, offset:offset + n] = b
            gather[b] = i * width + offset + ar.clamp(max=max(n - 1, 0))
    return row_group.to(device), src.to(device), positions.to(device), seg.to(device), gather.to(device)


def shared_prompts_supported(model: torch.nn.Module) -> bool:
    """Whether ``shared_prompt_logprobs`` can run on ``model``: a single-process model (a DDP/FSDP
    wrapper expects one forward per backward) whose forward takes a KV cache, no activation
    checkpointing (Hugging Face turns the cache off under it), and full-attention or Qwen3.5-style
    linear-attention layers (a sliding window would not honour the block mask of packed rows; a
    linear-attention layer continues from its prompt state, and its completions are not packed)."""
    from training.generation import _cache_kwarg

    inner = _unwrap(model)
    if inner is not model and not hasattr(model, "disable_adapter"):
        return False  # wrapped (DDP / FSDP)
    if any(getattr(m, "gradient_checkpointing", False) is True for m in inner.modules()):
        return False
    config = getattr(_base(inner), "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    if any(t not in ("full_attention", "linear_attention") for t in (getattr(config, "layer_types", None) or [])):
        return False
    return _cache_kwarg(inner) is not None


def _base(model: torch.nn.Module) -> torch.nn.Module:
    while hasattr(model, "get_base_model") and model is not model.get_base_model():
        model = model.get_base_model()
    return model


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    # DDP / FSDP wrappers from accelerate keep the PeftModel under .module
    while hasattr(model, "module") and not hasattr(model, "disable_adapter"):
        model = model.module
    return model


def _load_message(name: str, what: str, error: Exception) -> str:
    # a hub id is "org/name" (exactly one slash); anything else that names a path is a local directory
    local = os.path.isabs(name) or name.startswith(".") or name.count("/") != 1
    if local and not os.path.exists(name):
        return (f"model.name_or_path: {name!r} does not exist; build the tiny model with "
                f"`python -m training tiny-model --out {name}` or give a hub id / model directory")
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"model.name_or_path: cannot load the {what} from {name!r}: {first}"
