"""Generation engines: the one door every sampler goes through.

Training steps, dynamic-sampling rounds, held-out evaluation and the difficulty probe all sample
through an ``Engine``. Two exist (``sampling.engine``):

* ``hf`` (``HFEngine``): the trainer's own decoding loop over the policy in this process
  (training/generation.py), one batched ``generate`` per chunk of prompts.
* ``vllm`` (``VLLMEngine``): a vLLM OpenAI-compatible server, started for the run from the engine
  environment (training/engines/vllm_server.py) or given by ``vllm.url``; after every optimizer step
  the LoRA adapter is saved and hot-loaded into it (``sync``), so it samples the policy being trained.

Whatever the engine, a call yields the same ``GenerationBatch`` shapes: the exact prompt and
completion token ids (the trainer never re-tokenises text), the completion cut by the stop-string
contract of training/generation.py, ``finish_reasons`` (so ``truncated``), and the sampler's per-token
log-probs (``rollout/mismatch_kl``, ``ppo.tis_cap``).

``stream`` yields pieces as they finish, each with the *slots* it fills (``slot = prompt * n + j``
for sample ``j`` of prompt ``prompt``), so the rollout submits each piece's executions to the
sandbox while the rest is still generating; ``collect`` gathers a whole call in slot order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from training.engines.base import Engine, EngineError, Piece, merge_pieces

if TYPE_CHECKING:
    from training.generation import GenerationBatch

__all__ = ["Engine", "EngineError", "Piece", "as_engine", "collect", "make_engine", "merge_pieces"]


def collect(engine: Engine, prompts: Sequence[str], sampling: Any, *, n: int, seed: int | None,
            prompt_ids: Sequence[Sequence[int]] | None = None) -> GenerationBatch:
    """A whole ``stream`` call as one batch in slot order (grouped by prompt, as ``generate`` returns)."""
    extra = {} if prompt_ids is None else {"prompt_ids": prompt_ids}
    return merge_pieces(list(engine.stream(prompts, sampling, n=n, seed=seed, **extra)), prompts)


def as_engine(model_or_engine: Any, tokenizer: Any, chunks: int = 1) -> Engine:
    """An engine as is; a model wrapped in the ``hf`` engine (callers that hold a model keep working)."""
    if hasattr(model_or_engine, "stream"):
        return model_or_engine
    from training.engines.hf import HFEngine

    return HFEngine(model_or_engine, tokenizer, chunks=chunks)


def make_engine(config: Any, model: Any, tokenizer: Any, *, run_dir: Any, chunks: int = 1,
                stop: Any = None, log: Any = None, max_prompt_tokens: int | None = None,
                model_config: Any = None) -> Engine:
    """The engine ``config.sampling.engine`` names, ready to sample from ``model`` (``RunConfig``).

    ``vllm`` without ``vllm.url`` starts a server for the run (its log in ``run_dir/engine/``); ``stop()``
    returning true aborts the start (a cancel while the server loads); ``max_prompt_tokens`` sizes the
    server's context when ``vllm.max_model_len`` is null; ``model_config`` names what the server loads
    when it is not ``config.model`` (the probe's model and adapters).
    """
    if config.sampling.engine == "hf":
        from training.engines.hf import HFEngine

        return HFEngine(model, tokenizer, chunks=chunks)
    from training.engines.vllm import start_vllm_engine

    return start_vllm_engine(config, model, tokenizer, run_dir=run_dir, stop=stop, log=log,
                             max_prompt_tokens=max_prompt_tokens, model_config=model_config)
