"""How a run hands its policy to a vLLM server (``vllm.sync``): ``auto`` resolved to ``adapter`` or ``weights``, and
why, in a sentence the run page shows. Torch-free, so that the web app checks a run config with the rule the
engine (training/engines/vllm.py) runs by."""
from __future__ import annotations


def resolve_sync(requested: str, *, full_finetune: bool, own_server: bool, cuda: bool) -> str:
    """``vllm.sync`` as the run uses it (``sync_reason`` says why, for the run page)."""
    return choose_sync(requested, full_finetune=full_finetune, own_server=own_server, cuda=cuda)[0]


def sync_reason(requested: str, *, full_finetune: bool, own_server: bool, cuda: bool) -> str:
    """Why the run syncs as it does, in a sentence the runtime block shows."""
    return choose_sync(requested, full_finetune=full_finetune, own_server=own_server, cuda=cuda)[1]


def choose_sync(requested: str, *, full_finetune: bool, own_server: bool, cuda: bool) -> tuple[str, str]:
    """``auto`` is ``weights`` for a full fine-tune (no adapter to load) and for a server of the run's own on a
    machine without CUDA, else ``adapter`` (on a GPU the LoRA kernels cost little and an adapter is a few MB where
    the weights are the whole model).

    On CPU the choice follows a measurement, not the run's own model: vLLM's CPU build sampled a LoRA policy
    through its LoRA path at 33% of its base speed and as reloaded merged weights at 97% on the tiny Qwen3.5
    (RESULTS.md, rollout-bench), while a reload costs a small model little. Measuring both on the run's own
    model would take a second server start (a minute or more on CPU) before step 1, so auto does not; set
    vllm.sync to force the other."""
    if requested != "auto":
        return requested, "set in the run config (vllm.sync)"
    if full_finetune:
        return "weights", "auto: a full fine-tune has no adapter to load"
    if own_server and not cuda:
        return "weights", ("auto: on CPU vLLM's LoRA path sampled at a third of its base speed and reloaded merged "
                           "weights at 97% (measured on the tiny Qwen3.5, RESULTS.md); this model is not measured "
                           "at start (a second server start), set vllm.sync: adapter to compare")
    if not own_server:
        return "adapter", "auto: a server of yours (vllm.url) may not serve weight reloads"
    return "adapter", "auto: on a GPU an adapter is a few MB per step and the LoRA kernels cost little"
