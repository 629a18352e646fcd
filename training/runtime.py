"""What a run actually runs on: the ``start`` event's ``runtime`` block (a preflight, recorded).

Qwen3.5's Gated DeltaNet layers have two implementations in transformers: the kernels of
``flash-linear-attention`` (``fla``) and ``causal-conv1d`` when those packages import, else a
reference PyTorch fallback that is correct but slow (and a known source of sampler/trainer
log-prob drift in half precision). transformers picks one when the model's module is imported and
only says so in a log line; this module reads the choice back and puts it next to the versions,
device, dtype and layer mix, so the run page shows it and a GPU run on a fallback is a visible
warning rather than a silent slowdown.

Known-bad kernel combinations are found before the model loads (training/kernels.py): the block's
``kernels`` carries what became of them (``refused``, ``rerouted``), and ``linear_attention`` says which form
of the gated delta rule the sampler and the trainer each compute with.

On a CPU it also sets how float32 arithmetic treats denormals (``cpu_float_mode``), which decides
how fast those fallback kernels run there.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

# transformers' hub-kernel wrappers: (name in the runtime block, function in the modeling module,
# package that provides the fast kernel, the name of the fast implementation)
_FLUSH_DENORMAL: bool | None = None  # what ``cpu_float_mode`` set, None before it ran

_KERNELS = (
    ("gated_delta_rule", "torch_chunk_gated_delta_rule", "flash-linear-attention", "fla"),
    ("gated_delta_rule_decode", "torch_recurrent_gated_delta_rule", "flash-linear-attention", "fla"),
    ("causal_conv1d", "causal_conv1d_fn", "causal-conv1d", "cuda"),
)


def describe(model: Any, *, dtype: str, device: Any) -> dict:
    """``{torch, transformers, peft, accelerate, device, dtype, architecture, layer_types, kernels,
    warnings}`` for ``model`` (a transformers model, possibly LoRA-wrapped)."""
    import torch

    base = _base_model(model)
    config = getattr(base, "config", None)
    device_name = str(device)
    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        device_name = f"{device} ({torch.cuda.get_device_name(device)})"
    param = next(iter(base.parameters()), None)
    types = list(getattr(config, "layer_types", None) or [])
    if not types and config is not None:
        types = ["full_attention"] * int(getattr(config, "num_hidden_layers", 0) or 0)
    kernels: dict[str, Any] = {"attention": str(getattr(config, "_attn_implementation", None) or "eager")}
    forms = None
    if "linear_attention" in types:
        module = sys.modules.get(type(base).__module__)
        for key, function, _, fast in _KERNELS:
            if hasattr(module, function):
                kernels[key] = fast if _uses_fast_kernel(getattr(module, function, None)) else "torch"
        forms = linear_attention_forms(kernels)
    from training.kernels import report

    preflight = report()  # known-bad combinations routed around (or refused) before the model loaded
    kernels.update(preflight)
    on_gpu = getattr(device, "type", str(device)) == "cuda"
    warnings = kernel_warnings(kernels, on_gpu=on_gpu)
    warnings += [f"{e['kernel']} rerouted: {e['combination']}: {e['error']}. It runs as: {e['route']}. "
                 f"Fix: {e['fix']}" for e in preflight["rerouted"]]
    out = {
        **versions(),
        "device": device_name,
        "dtype": str(param.dtype).removeprefix("torch.") if param is not None else dtype,
        "architecture": type(base).__name__,
        "layer_types": dict(Counter(types)),
        "kernels": kernels,
        "flush_denormal": _FLUSH_DENORMAL,
        "warnings": warnings,
    }
    if forms is not None:
        out["linear_attention"] = forms
    return out


def linear_attention_forms(kernels: dict) -> dict:
    """``{sampler, trainer, same_form, kernels: {sampler, trainer}, note}``: which form of the gated delta rule
    each side computes a token's log-prob with (item 5 of issue 33).

    The ``hf`` engine prefills the prompt with the chunked form and then decodes one token a step with the
    recurrent form; the trainer (old, reference and policy log-probs) runs the whole sequence through the
    chunked form. Both compute the same function exactly, in another order: in float32 they agree to
    ~1e-13 (mismatch KL on CPU), in bfloat16 they do not (measured on an H200 with the torch forms:
    ``rollout/mismatch_kl`` 1.0-1.2e-3, single tokens 0.20-0.23 nats apart). A vLLM engine samples with
    its own kernels (``engine`` says which server)."""
    decode = kernels.get("gated_delta_rule_decode", kernels.get("gated_delta_rule"))
    chunk = kernels.get("gated_delta_rule")
    return {"sampler": "recurrent", "trainer": "chunked", "same_form": False,
            "kernels": {"sampler": decode, "trainer": chunk},
            "note": f"the hf engine decodes with the recurrent form ({decode}), the trainer scores with the chunked "
                    f"form ({chunk}): equal in exact arithmetic, rounded differently in half precision "
                    f"(rollout/mismatch_kl measures it; ppo.tis_cap corrects for it)"}


def cpu_float_mode() -> bool:
    """Flush float32 denormals to zero on the CPU (FTZ/DAZ) -> whether this CPU supports it.

    The gated delta rule of Qwen3.5's linear-attention layers multiplies by decays ``exp(sum g)``
    that underflow below 1.2e-38 over a chunk, and x86 arithmetic on such denormal numbers is tens
    of times slower than on normal ones: with them flushed, the tiny Qwen3.5 model's forward +
    backward on CPU takes a third less time (``benchmarks/train_step_bench.py --arch qwen3_5``).
    A number that small is already zero at the precision of a log-probability, and sampler and
    trainer run in the same process, so they still agree exactly. GPUs are unaffected.

    The mode belongs to a thread: torch's worker threads inherit it when they are created, so this
    runs before the first parallel torch operation of the process (``load_policy`` calls it first).
    """
    import torch

    global _FLUSH_DENORMAL
    _FLUSH_DENORMAL = bool(torch.set_flush_denormal(True))
    return _FLUSH_DENORMAL


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "peft", "accelerate"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def kernel_warnings(kernels: dict[str, Any], *, on_gpu: bool) -> list[str]:
    """A line per special layer that runs the torch fallback on a GPU (on a CPU the fallback is the
    only implementation there is, so it is no warning)."""
    if not on_gpu:
        return []
    out = []
    rerouted = {e.get("kernel") for e in kernels.get("rerouted") or [] if isinstance(e, dict)}
    for key, _, package, _ in _KERNELS:
        if key in rerouted or (key == "gated_delta_rule_decode" and kernels.get("gated_delta_rule") == "torch"):
            continue  # the rerouted entry says why; one line per missing package is enough
        if kernels.get(key) == "torch":
            out.append(f"{key} runs transformers' PyTorch fallback: slow, and its log-probs drift from the "
                       f"trainer's in bfloat16; install {package} on the GPU worker (see README, 'GPU extras')")
    return out


def _uses_fast_kernel(fn: Any) -> bool:
    """Whether transformers' ``use_kernel_func_from_hub_with_fallback`` wrapper ``fn`` resolved to the
    package's kernel (its closure says so) rather than the torch function it wraps."""
    from training.kernels import hub_wrapper_closure

    return bool(hub_wrapper_closure(fn).get("is_new_implementation", False))


def _base_model(model: Any) -> Any:
    inner = model
    while hasattr(inner, "module") and not hasattr(inner, "get_base_model"):
        inner = inner.module  # DDP / FSDP
    while hasattr(inner, "get_base_model") and inner is not inner.get_base_model():
        inner = inner.get_base_model()
    return inner
