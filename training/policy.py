"""The policy: a Hugging Face causal LM (+ tokenizer), LoRA-wrapped, and its reference.

With LoRA the reference policy is the *same* module with its adapters switched off
(``with model.disable_adapter():``), so a 9B model costs one copy of the weights, not two. With a full
fine-tune (``model.lora: null``) there is nothing to switch off, so a frozen copy of the initial
weights is kept as the reference: twice the weight memory, which is the price of full fine-tuning
with a KL anchor (set ``ppo.kl_coef: 0`` to skip the copy).

``sequence_logprobs`` is the one forward pass used for old, reference and new log-probabilities, so
they are computed identically and the PPO ratio is exactly 1 where the policy has not moved.
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
    """Eval mode for sampling, with LoRA adapters merged into the base weights when that is exact enough.

    Unmerged, every adapted linear layer costs three matmuls per decoding step instead of one, and
    decoding is a long chain of small matmuls: merging makes sampling ~2-3x faster on CPU. Merge and
    unmerge round the base weights; in float32 that is ~1e-7 relative per step (negligible), in
    bfloat16/float16 it would be ~1e-3 and accumulate over the run, so half-precision models sample
    unmerged. Restores train mode afterwards.
    """
    peft_model = _unwrap(model)
    merge = (hasattr(peft_model, "merge_adapter") and all(
        p.dtype == torch.float32 for p in peft_model.parameters()))
    was_training = model.training
    model.eval()
    if merge:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "already merged" style notices
            peft_model.merge_adapter()
    try:
        yield peft_model
    finally:
        if merge:
            peft_model.unmerge_adapter()
        model.train(was_training)


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

    name = model_config.name_or_path
    tokenizer = load_tokenizer(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype(model_config.dtype))
    except (OSError, ValueError) as e:
        raise ModelLoadError(_load_message(name, "model", e)) from None
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
