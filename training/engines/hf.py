"""The ``hf`` engine: the trainer's own decoding loop (training/generation.py) over the policy itself."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from training import generation
from training.engines.base import Piece
from training.policy import generation_mode


class HFEngine:
    """Samples ``model`` in this process, one batched ``generate`` per chunk of prompts.

    With ``chunks > 1`` the prompts are generated in that many batches and each is yielded (so its
    executions start) while the next one generates; chunk ``c`` draws from ``seed + c``.
    """

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, *, chunks: int = 1):
        self.model = model
        self.tokenizer = tokenizer
        self.chunks = max(1, chunks)

    def stream(self, prompts: Sequence[str], sampling: Any, *, n: int, seed: int | None,
               prompt_ids: Sequence[Sequence[int]] | None = None) -> Iterator[Piece]:
        chunks = max(1, min(self.chunks, len(prompts)))
        bounds = [round(i * len(prompts) / chunks) for i in range(chunks + 1)]
        for c in range(chunks):
            lo, hi = bounds[c], bounds[c + 1]
            extra = {} if prompt_ids is None else {"prompt_ids": prompt_ids[lo:hi]}
            with generation_mode(self.model) as sampler:
                batch = generation.generate(sampler, self.tokenizer, prompts[lo:hi], sampling, num_return_sequences=n,
                                            generator_seed=None if seed is None else seed + c, **extra)
            batch.prompt_index = [lo + i for i in batch.prompt_index]
            yield list(range(lo * n, hi * n)), batch

    def sync(self, model: Any) -> None:
        self.model = model  # the same weights: nothing to copy

    def describe(self) -> dict:
        return {"name": self.name, "version": None, "url": None, "dtype": None}

    def close(self) -> None:
        pass
