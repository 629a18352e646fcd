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
        """``{name, version, url, dtype, log}``: the ``engine`` entry of the start event's ``runtime``."""
        ...

    def close(self) -> None:
        ...
