"""What every generation engine is (training/engines/__init__.py says how they are used). No torch here: the
web app imports the vLLM server's availability check (vllm_server.py) through this module."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from training.generation import GenerationBatch

Piece = tuple[list[int], "GenerationBatch"]
"""Slots filled and the sequences that fill them (``batch.prompt_index`` indexes the call's prompts)."""


class EngineError(RuntimeError):
    """The engine cannot sample: it did not start, died, or answered something unusable."""


class Engine(Protocol):
    name: str

    def stream(self, prompts: Sequence[str], sampling: Any, *, n: int, seed: int | None,
               prompt_ids: Sequence[Sequence[int]] | None = None) -> Iterator[Piece]:
        """Sample ``n`` completions of every prompt; yield pieces as they finish (all slots, once each).

        ``prompt_ids`` (one id list per prompt): condition on exactly these tokens instead of tokenising
        ``prompts`` (a multi-turn trajectory: earlier turns and the feedback appended as ids)."""
        ...

    def sync(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights (after an optimizer step, a resume)."""
        ...

    def describe(self) -> dict:
        """``{name, version, url, dtype, log}`` (vllm adds ``sync``): the ``engine`` entry of the start event's ``runtime``."""
        ...

    def close(self) -> None:
        ...


def merge_pieces(pieces: Sequence[Piece], prompts: Sequence[str]) -> GenerationBatch:
    from training.generation import GenerationBatch

    if len(pieces) == 1 and pieces[0][0] == list(range(len(pieces[0][1]))):
        batch = pieces[0][1]
        batch.prompts = list(prompts)
        return batch
    rows: dict[int, tuple[GenerationBatch, int]] = {}
    for slots, batch in pieces:
        for row, slot in enumerate(slots):
            rows[slot] = (batch, row)
    out = GenerationBatch([], [], [], [], [], [], prompts=list(prompts))
    for slot in sorted(rows):
        batch, row = rows[slot]
        out.prompt_ids.append(batch.prompt_ids[row])
        out.completion_ids.append(batch.completion_ids[row])
        out.texts.append(batch.texts[row])
        out.prompt_index.append(batch.prompt_index[row])
        out.finish_reasons.append(batch.finish_reasons[row])
        out.generated_tokens.append(batch.generated_tokens[row])
        if batch.sampler_logprobs:
            out.sampler_logprobs.append(batch.sampler_logprobs[row])
    return out
