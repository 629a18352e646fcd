"""Rollout: sample candidates for a step's problems, execute them in the sandbox, score them.

One step's rollout is two halves so that the sandbox never waits for the accelerator or vice versa:

    pending = start_rollout(...)   # the engine's pieces (a generate chunk, a finished vLLM completion)
                                   # -> each submitted to the sandbox as it arrives
    ...                            # the trainer computes reference / old logprobs meanwhile
    rollout = pending.finish()     # wait for the executions, score every candidate

With ``chunks > 1`` the problems are generated in that many batches and chunk i executes while chunk
i + 1 is generated. One chunk (the default) is the fastest on an accelerator, where a bigger
``generate`` batch is nearly free; the overlap then comes from the logprob passes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from training import rewards as R
from training.candidates import (CandidateRecord, Rollout, _assembled_code, _candidate, _result_dict,  # noqa: F401
                                 sandbox_reply, score_execution)  # (CandidateRecord, sandbox_reply: re-exported)
from training.generation import GenerationBatch, build_prompt


@dataclass
class PendingRollout:
    """Generated candidates whose executions are still running (see module docstring)."""

    problems: list[Any]
    batch: GenerationBatch
    codes: list[str]
    futures: list[Future]
    slots: list[list[int]]
    """The candidates (slots, in ``batch`` order) each future executes; it returns ``repeats`` x that many results."""
    submitted_at: float
    time_generate_s: float
    score_args: dict = field(default_factory=dict)
    _done_at: list[float] = field(default_factory=list)

    def finish(self) -> Rollout:
        """Wait for every execution and score the candidates."""
        results: list[list[dict]] = [[] for _ in self.codes]  # per candidate: its executions
        for fut, slots in zip(self.futures, self.slots):
            chunk = [_result_dict(r) for r in fut.result()]
            size = len(slots)
            repeats = len(chunk) // size if size else 1
            for i, slot in enumerate(slots):
                results[slot] = [chunk[r * size + i] for r in range(repeats)]
        sandbox_s = (max(self._done_at) if self._done_at else time.monotonic()) - self.submitted_at
        return score_rollout(self.problems, self.batch, self.codes, results,
                             time_generate_s=self.time_generate_s, time_sandbox_s=max(0.0, sandbox_s),
                             **self.score_args)


def pick_problems(num_problems: int, per_step: int, step: int, seed: int) -> list[int]:
    """Indices of the train problems of RL step ``step`` (1-based): seeded epochs without replacement.

    The problems are walked in a fresh seeded permutation per epoch; a step takes the next
    ``per_step`` distinct ones (at most ``num_problems``). A pure function of (step, seed), so a
    resumed run sees exactly the problems an uninterrupted one would.
    """
    if num_problems <= 0:
        raise ValueError("no train-split problems to sample from; the problem file needs split: train problems")
    per_step = min(per_step, num_problems)
    picked: list[int] = []
    pos = (step - 1) * per_step
    perms: dict[int, list[int]] = {}
    while len(picked) < per_step:
        epoch, offset = divmod(pos, num_problems)
        if epoch not in perms:
            order = list(range(num_problems))
            random.Random(seed * 1_000_003 + epoch).shuffle(order)
            perms[epoch] = order
        idx = perms[epoch][offset]
        if idx not in picked:
            picked.append(idx)
        pos += 1
    return picked


def start_rollout(
    engine: Any,
    tokenizer: Any,
    problems: Sequence[Any],
    sampling: Any,
    runner: Any,
    *,
    generator_seed: int | None,
    repeats: int = 1,
    chunks: int = 1,
    weights: Mapping[str, float] | None = None,
    normalize: bool = True,
    timeout_s: float | None = None,
    overlong: Any = None,
    penalize_flags: Sequence[str] = (),
    candidates: int | None = None,
    feedback: Any = None,
) -> Any:
    """Generate ``candidates_per_problem`` completions per problem and submit their executions.

    ``engine`` is a generation engine (training/engines/; a model is sampled by the ``hf`` engine with
    ``chunks``), ``runner`` a ``sandbox.Runner`` (kept alive for the whole run). Each piece the engine
    hands back (a chunk of ``generate``, or one finished vLLM completion) is submitted to the sandbox at
    once, so executions overlap generation.
    ``overlong`` is the run's ``OverlongConfig`` (None: truncated candidates are scored as they are).
    ``candidates`` overrides K (the difficulty probe samples its own count, one included).
    With ``sampling.turns > 1`` each candidate is a repair trajectory (training/turns.py; ``feedback`` is
    the run's ``FeedbackConfig``, None: its defaults) and the result a ``turns.PendingTrajectories``,
    which offers the same ``batch`` and ``finish()``.
    """
    from sandbox import Candidate
    from training.engines import as_engine, merge_pieces

    engine = as_engine(engine, tokenizer, chunks)
    k = sampling.candidates_per_problem if candidates is None else candidates
    if getattr(sampling, "turns", 1) > 1:
        from training.turns import start_trajectories

        return start_trajectories(engine, tokenizer, problems, sampling, runner, k=k, generator_seed=generator_seed,
                                  repeats=repeats, feedback=feedback,
                                  score_args={"weights": weights, "normalize": normalize, "timeout_s": timeout_s,
                                              "overlong": overlong, "penalize_flags": tuple(penalize_flags)})
    thinking = bool(getattr(sampling, "thinking", False))
    prompts = [build_prompt(p, tokenizer, sampling.prompt_style, thinking) for p in problems]
    problem_map = {p.id: p for p in problems}
    pieces: list = []
    futures: list[Future] = []
    slots_of: list[list[int]] = []
    codes: list[str] = [""] * (len(problems) * k)
    done_at: list[float] = []
    submitted_at: float | None = None
    g0 = time.monotonic()
    submit_s = 0.0
    for slots, batch in engine.stream(prompts, sampling, n=k, seed=generator_seed):
        s0 = time.monotonic()
        cands = []
        for slot, j in zip(slots, range(len(batch))):
            problem = problems[batch.prompt_index[j]]
            text = batch.texts[j]
            answer = sandbox_reply(text, thinking) if sampling.prompt_style == "chat" else text
            cands.append(_candidate(Candidate, problem, answer, sampling.prompt_style))
            codes[slot] = _assembled_code(problem, answer, sampling.prompt_style)
        if submitted_at is None:
            submitted_at = time.monotonic()
        fut = runner.submit_batch(problem_map, cands * repeats)
        fut.add_done_callback(lambda _f: done_at.append(time.monotonic()))
        futures.append(fut)
        slots_of.append(list(slots))
        pieces.append((list(slots), batch))
        submit_s += time.monotonic() - s0
    generate_s = time.monotonic() - g0 - submit_s
    return PendingRollout(
        problems=list(problems), batch=merge_pieces(pieces, prompts), codes=codes, futures=futures,
        slots=slots_of, submitted_at=submitted_at or time.monotonic(), time_generate_s=generate_s,
        score_args={"weights": weights, "normalize": normalize, "timeout_s": timeout_s,
                    "prompt_style": sampling.prompt_style, "group_size": k, "overlong": overlong,
                    "max_new_tokens": sampling.max_new_tokens, "penalize_flags": tuple(penalize_flags)},
        _done_at=done_at,
    )


def score_rollout(
    problems: Sequence[Any],
    batch: GenerationBatch,
    codes: Sequence[str],
    results: Sequence[Sequence[dict]],
    *,
    group_size: int,
    weights: Mapping[str, float] | None = None,
    normalize: bool = True,
    timeout_s: float | None = None,
    prompt_style: str = "completion",
    time_generate_s: float = 0.0,
    time_sandbox_s: float = 0.0,
    overlong: Any = None,
    max_new_tokens: int | None = None,
    penalize_flags: Sequence[str] = (),
) -> Rollout:
    """Rewards of every candidate from its execution results (several when repeated, averaged);
    with ``overlong.mode == "soft"`` DAPO's length penalty is added to each total; a candidate that
    carries a flag of ``penalize_flags`` gets a total of 0 (its per-dimension rewards are kept)."""
    soft = overlong is not None and overlong.mode == "soft" and max_new_tokens is not None
    truncated = batch.truncated
    weights = R.weights_dict(weights)
    records: list[CandidateRecord] = []
    totals: list[float] = []
    for g, problem in enumerate(problems):
        group = range(g * group_size, (g + 1) * group_size)
        ref = problem.reference_solution
        ref_len = R.code_length(ref) if ref else R.group_median_length([codes[i] for i in group])
        limit = timeout_s if timeout_s is not None else problem.time_limit_s
        for i in group:
            scored = score_execution(problem, codes[i], batch.texts[i], results[i], len(batch.completion_ids[i]),
                                     weights=weights, normalize=normalize, time_limit_s=limit,
                                     reference_length=ref_len, prompt_style=prompt_style,
                                     overlong=overlong if soft else None, max_new_tokens=max_new_tokens,
                                     penalize_flags=penalize_flags)
            records.append(CandidateRecord(
                problem_id=problem.id, group=g, text=batch.texts[i], code=codes[i], result=results[i][0],
                rewards=scored.rewards, reward=scored.reward, passed=scored.passed,
                truncated=truncated[i], overlong_penalty=scored.overlong_penalty, flags=scored.flags,
                penalized_flags=scored.penalized_flags))
            totals.append(scored.reward)
    rewards = torch.tensor(totals, dtype=torch.float32).view(len(problems), group_size)  # (P, K)
    return Rollout(problems=list(problems), candidates=records, batch=batch, rewards=rewards,
                   generated_tokens=batch.num_generated_tokens, time_generate_s=time_generate_s,
                   time_sandbox_s=time_sandbox_s)


def score_samples(problems: Sequence[Any], batch: GenerationBatch, results: Sequence[Any], *, group_size: int,
                  prompt_style: str = "completion", reward: Any = None, timeout_s: float | None = None,
                  max_new_tokens: int | None = None, answers: Sequence[str] | None = None) -> list[CandidateRecord]:
    """Completions executed once each (the held-out evaluation's samples), scored as a step's candidates
    are (``score_rollout``), so that they serialise the same way (``CandidateRecord.event_dict``).

    ``batch`` holds ``group_size`` sequences per problem, grouped by problem; ``results`` one execution
    result per sequence (``ExecutionResult`` or its dict); ``reward`` is the run's ``RewardConfig``
    (None: the defaults); ``answers`` what of each text went to the sandbox (``sandbox_reply``; None: the
    texts). The code of each record is the program the sandbox ran.
    """
    from training.config import RewardConfig

    reward = reward if reward is not None else RewardConfig()
    answers = batch.texts if answers is None else answers
    codes = [_assembled_code(problems[batch.prompt_index[i]], text, prompt_style) for i, text in enumerate(answers)]
    scored = score_rollout(problems, batch, codes, [[_result_dict(r)] for r in results], group_size=group_size,
                           weights=reward.weights.as_dict(), normalize=reward.weighted_mean, timeout_s=timeout_s,
                           prompt_style=prompt_style, overlong=reward.overlong, max_new_tokens=max_new_tokens,
                           penalize_flags=reward.penalize_flags)
    return scored.candidates
