"""The difficulty probe: how often does a model solve each problem before any training?

``probe`` samples ``samples`` candidates per problem through the rollout that training uses
(``rollout.start_rollout``: the same prompts, sampler, stop strings, chat/thinking handling and
sandbox submission), executes them in the sandbox and yields each problem's
``ProblemDifficulty`` (passed of samples). Problems go in chunks; chunk i executes while chunk i + 1
is generated. ``python -m training probe`` prints the results as JSON lines (training/difficulty.py
reads them back).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from training.difficulty import ProblemDifficulty

if TYPE_CHECKING:
    from sandbox import BatchRunner

CANDIDATES_PER_GENERATE = 256
"""Most candidates sampled by one batched ``generate`` (problems per chunk = this // samples, at least 1)."""
PROGRESS_CHUNKS = 8
"""Fewest chunks a set of at least this many problems is probed in: progress (the result lines, the
page's count) moves at least this often, rather than once at the end of a set that fits one generate."""


def chunk_size(problems: int, samples: int) -> int:
    """Problems per chunk: at most ``CANDIDATES_PER_GENERATE`` candidates, and at least
    ``PROGRESS_CHUNKS`` chunks when there are that many problems."""
    return max(1, min(CANDIDATES_PER_GENERATE // samples, math.ceil(problems / PROGRESS_CHUNKS)))


def probe(model: Any, tokenizer: Any, problems: Sequence[Any], sampling: Any, runner: BatchRunner, *, samples: int,
          seed: int = 0, timeout_s: float | None = None, feedback: Any = None,
          progress: Callable[[int, int], None] | None = None) -> Iterator[ProblemDifficulty]:
    """Yield each problem's ``ProblemDifficulty`` in ``problems`` order.

    ``sampling`` is the run's ``SamplingConfig`` (its ``candidates_per_problem`` is replaced by
    ``samples``); ``runner`` a ``sandbox.BatchRunner``; ``seed`` makes the probe repeatable. A sample
    passes when every test ran and passed; with ``sampling.turns > 1`` a sample is a repair trajectory
    (``feedback``: the run's ``FeedbackConfig``) and passes when its last turn does.
    ``progress(done, total)`` is called after each chunk (see ``chunk_size``), once its problems'
    results are yielded.
    """
    from training.rollout import start_rollout

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    problems = list(problems)
    per_chunk = chunk_size(len(problems), samples)
    done = 0
    pending = None
    for start in range(0, len(problems), per_chunk):
        chunk = problems[start:start + per_chunk]
        # Submitting chunk i + 1 (generation included) before collecting chunk i keeps the sandbox busy.
        submitted = start_rollout(model, tokenizer, chunk, sampling, runner, generator_seed=seed + start,
                                  candidates=samples, timeout_s=timeout_s, feedback=feedback)
        if pending is not None:
            done += yield from _results(pending, samples)
            if progress:
                progress(done, len(problems))
        pending = submitted
    if pending is not None:
        done += yield from _results(pending, samples)
        if progress:
            progress(done, len(problems))


def _results(pending: Any, samples: int) -> Iterator[ProblemDifficulty]:
    rollout = pending.finish()
    for g, problem in enumerate(rollout.problems):
        group = rollout.candidates[g * samples:(g + 1) * samples]
        yield ProblemDifficulty(problem.id, samples, sum(c.passed for c in group))
    return len(rollout.problems)
