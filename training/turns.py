"""Multi-turn repair rollouts: write, run, read the failure, fix (``sampling.turns > 1``).

Each candidate is a trajectory. Turn 1 is the one-turn rollout's sampling (the same prompts, ``K``
samples per problem, each engine piece submitted to the sandbox as it arrives). While a turn's code
fails and turns are left, the sandbox's answer (training/feedback.py) is appended to the
trajectory's *tokens* as a user message, and every unfinished trajectory's next turn is generated
together (one engine call, ``n = 1`` per trajectory, conditioned on its exact token ids), its
executions streamed to the sandbox again. A passing turn ends its trajectory.

For the trainer a trajectory is one sequence: its turn-1 prompt (shared by the group, as in a
one-turn step) and a "completion" ``reply_1 + feedback_1 + reply_2 + ...`` whose feedback tokens
are marked (``GenerationBatch.completion_turns`` = -1) and left out of the loss, the KL and the
entropy. The last turn's executions are still running when ``start_trajectories`` returns, so the
trainer's log-prob passes overlap them as in a one-turn step.

Credit (``reward.turns``): ``final`` gives every token of a trajectory its last turn's reward (the
trajectory's reward, advantages over the group as today); ``discounted`` gives turn ``t``'s tokens
the return ``G_t = sum_{s >= t} gamma^(s - t) r_s`` (Kevin-32B's multi-turn credit), advantages
computed over the pool of the group's turn returns (``advantages.turn_advantages``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from training import rewards as R
from training.feedback import continuation_ids, feedback_message
from training.generation import GenerationBatch, build_prompt
from training.candidates import (CandidateRecord, Rollout, assembled_code, result_dict, sandbox_candidate,
                                 sandbox_reply, score_execution)

if TYPE_CHECKING:
    from sandbox import BatchRunner

TURN_SEED = 1_000_033
"""Generator-seed offset between turns (a prime, apart from chunk and dynamic-sampling round offsets)."""


@dataclass
class Turn:
    """One attempt of a trajectory."""

    reply: str
    """The sampled reply text (stop-cut, no EOS)."""
    answer: str
    """What of it went to the sandbox (``sandbox_reply``)."""
    code: str
    """The program that was executed."""
    completion_ids: list[int]
    sampler_logprobs: list[float]
    finish_reason: str
    generated_tokens: int
    results: list[dict] = field(default_factory=list)
    """Its executions (``repeats`` of them), filled when they finish."""
    feedback: str | None = None
    """The message sent after this turn (None: it passed, or it was the last)."""
    feedback_ids: list[int] = field(default_factory=list)
    """That message's token ids as appended (end of this turn, the user turn, the next assistant opener)."""

    @property
    def passed(self) -> bool:
        return bool(self.results) and self.results[0].get("status") == "passed"

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class Trajectory:
    group: int
    """Its problem's index in the rollout."""
    prompt_ids: list[int]
    """The turn-1 prompt's ids (shared by the group)."""
    turns: list[Turn] = field(default_factory=list)

    def context_ids(self) -> list[int]:
        """Every token so far: the prompt, each turn's reply and the feedback after it."""
        ids = list(self.prompt_ids)
        for turn in self.turns:
            ids += turn.completion_ids + turn.feedback_ids
        return ids


def trajectory_batch(trajectories: Sequence[Trajectory], prompts: Sequence[str]) -> GenerationBatch:
    """The trajectories as one batch for the trainer: prompt = turn-1 prompt, completion = every turn's
    reply and the feedback between them, ``completion_turns`` tagging each token's turn (-1: feedback)."""
    batch = GenerationBatch([], [], [], [], [], [], prompts=list(prompts))
    with_sampler = all(len(t.sampler_logprobs) == len(t.completion_ids) for tr in trajectories for t in tr.turns)
    for tr in trajectories:
        ids: list[int] = []
        tags: list[int] = []
        logprobs: list[float] = []
        for t, turn in enumerate(tr.turns):
            ids += turn.completion_ids
            tags += [t] * len(turn.completion_ids)
            logprobs += turn.sampler_logprobs if with_sampler else []
            if turn.feedback_ids and t < len(tr.turns) - 1:
                ids += turn.feedback_ids
                tags += [-1] * len(turn.feedback_ids)
                logprobs += [0.0] * len(turn.feedback_ids)
        last = tr.turns[-1]
        batch.prompt_ids.append(list(tr.prompt_ids))
        batch.completion_ids.append(ids)
        batch.completion_turns.append(tags)
        batch.texts.append(last.reply)
        batch.prompt_index.append(tr.group)
        batch.finish_reasons.append(last.finish_reason)
        batch.generated_tokens.append(sum(turn.generated_tokens for turn in tr.turns))
        if with_sampler:
            batch.sampler_logprobs.append(logprobs)
    return batch


@dataclass
class PendingTrajectories:
    """Trajectories whose last turn's executions are still running (``PendingRollout``'s interface)."""

    problems: list[Any]
    trajectories: list[Trajectory]
    batch: GenerationBatch
    futures: list[tuple[Future, list[int]]]
    """The last turn's executions: each future's results and the trajectories it executes."""
    k: int
    repeats: int
    prompt_style: str
    max_new_tokens: int
    submitted_at: float
    time_generate_s: float
    score_args: dict
    _done_at: list[float] = field(default_factory=list)

    def finish(self) -> Rollout:
        """Wait for the last executions and score every turn of every trajectory."""
        _collect(self.futures, self.trajectories, self.repeats)
        sandbox_s = (max(self._done_at) if self._done_at else time.monotonic()) - self.submitted_at
        return score_trajectories(self.problems, self.trajectories, self.batch, group_size=self.k,
                                  prompt_style=self.prompt_style, max_new_tokens=self.max_new_tokens,
                                  time_generate_s=self.time_generate_s, time_sandbox_s=max(0.0, sandbox_s),
                                  **self.score_args)


def start_trajectories(engine: Any, tokenizer: Any, problems: Sequence[Any], sampling: Any, runner: BatchRunner, *,
                       k: int, generator_seed: int | None, repeats: int = 1, feedback: Any = None,
                       score_args: dict | None = None) -> PendingTrajectories:
    """Roll out ``k`` repair trajectories per problem for up to ``sampling.turns`` turns (module docstring).

    ``engine`` a generation engine, ``runner`` executes the turns (``sandbox.BatchRunner``); ``feedback``
    the run's ``FeedbackConfig`` (None: the defaults); ``score_args`` the scoring keywords of
    ``score_trajectories`` (weights, normalize, timeout_s, overlong, penalize_flags).
    """
    from sandbox import Candidate
    from training.config import FeedbackConfig

    feedback = feedback if feedback is not None else FeedbackConfig()
    thinking = bool(getattr(sampling, "thinking", False))
    problems = list(problems)
    prompts = [build_prompt(p, tokenizer, sampling.prompt_style, thinking) for p in problems]
    problem_map = {p.id: p for p in problems}
    trajectories: list[Trajectory | None] = [None] * (len(problems) * k)
    done_at: list[float] = []
    futures: list[tuple[Future, list[int]]] = []
    submitted_at: float | None = None
    g0 = time.monotonic()
    waited = 0.0  # time spent on submissions and waiting for a turn's verdicts: not generation
    active = list(range(len(problems) * k))
    for t in range(sampling.turns):
        if t == 0:
            pieces = engine.stream(prompts, sampling, n=k, seed=generator_seed)
        else:
            seed = None if generator_seed is None else generator_seed + TURN_SEED * t
            pieces = engine.stream([prompts[trajectories[i].group] for i in active], sampling, n=1, seed=seed,
                                   prompt_ids=[trajectories[i].context_ids() for i in active])
        for slots, batch in pieces:
            s0 = time.monotonic()
            owners, cands = [], []
            for row, slot in enumerate(slots):
                index = slot if t == 0 else active[slot]
                if t == 0:
                    trajectories[index] = Trajectory(group=slot // k, prompt_ids=list(batch.prompt_ids[row]))
                traj = trajectories[index]
                problem = problems[traj.group]
                answer = sandbox_reply(batch.texts[row], thinking)
                traj.turns.append(Turn(
                    reply=batch.texts[row], answer=answer, code=assembled_code(problem, answer, "chat"),
                    completion_ids=list(batch.completion_ids[row]),
                    sampler_logprobs=list(batch.sampler_logprobs[row]) if batch.sampler_logprobs else [],
                    finish_reason=batch.finish_reasons[row], generated_tokens=batch.generated_tokens[row]))
                owners.append(index)
                cands.append(sandbox_candidate(Candidate, problem, answer, "chat"))
            if submitted_at is None:
                submitted_at = time.monotonic()
            fut = runner.submit_batch(problem_map, cands * repeats)
            fut.add_done_callback(lambda _f: done_at.append(time.monotonic()))
            futures.append((fut, owners))
            waited += time.monotonic() - s0
        if t == sampling.turns - 1:
            break
        w0 = time.monotonic()
        _collect(futures, trajectories, repeats)
        futures = []
        active = [i for i in active if not trajectories[i].turns[-1].passed]
        for i in active:
            traj = trajectories[i]
            turn = traj.turns[-1]
            turn.feedback = feedback_message(problems[traj.group], turn.results[0], turn.code, feedback)
            eos = [turn.completion_ids[-1]] if turn.finish_reason == "eos" and turn.completion_ids else []
            turn.feedback_ids = continuation_ids(tokenizer, turn.feedback, reply_ids=turn.completion_ids,
                                                 eos_ids=eos, thinking=thinking)
        waited += time.monotonic() - w0
        if not active:
            break
    generate_s = time.monotonic() - g0 - waited
    done = [tr for tr in trajectories if tr is not None]
    if len(done) != len(trajectories):
        raise RuntimeError(f"the engine filled {len(done)} of {len(trajectories)} slots of turn 1")
    return PendingTrajectories(
        problems=problems, trajectories=done, batch=trajectory_batch(done, prompts), futures=futures, k=k,
        repeats=repeats, prompt_style=sampling.prompt_style, max_new_tokens=sampling.max_new_tokens,
        submitted_at=submitted_at or time.monotonic(), time_generate_s=generate_s, score_args=dict(score_args or {}),
        _done_at=done_at)


def _collect(futures: Sequence[tuple[Future, list[int]]], trajectories: Sequence[Trajectory], repeats: int) -> None:
    """Wait for ``futures`` and give each trajectory's newest turn its executions."""
    for fut, owners in futures:
        chunk = [result_dict(r) for r in fut.result()]
        size = len(owners)
        reps = len(chunk) // size if size else repeats
        for i, index in enumerate(owners):
            trajectories[index].turns[-1].results = [chunk[r * size + i] for r in range(reps)]


def score_trajectories(problems: Sequence[Any], trajectories: Sequence[Trajectory], batch: GenerationBatch, *,
                       group_size: int, weights: Any = None, normalize: bool = True, timeout_s: float | None = None,
                       prompt_style: str = "chat", overlong: Any = None, max_new_tokens: int | None = None,
                       penalize_flags: Sequence[str] = (), time_generate_s: float = 0.0,
                       time_sandbox_s: float = 0.0) -> Rollout:
    """Every turn scored as a one-turn candidate is (``score_execution``: the overlong penalty on the
    turn's own reply length; the conciseness baseline of a problem without a reference is the median
    of its turn-1 programs). The record's own fields are its last turn's; its ``reward`` is 0 when
    any turn carries a penalized flag (the hack is in its tokens), and its ``flags`` every turn's."""
    soft = overlong is not None and overlong.mode == "soft" and max_new_tokens is not None
    weights = R.weights_dict(weights)
    records: list[CandidateRecord] = []
    for g, problem in enumerate(problems):
        group = trajectories[g * group_size:(g + 1) * group_size]
        ref = problem.reference_solution
        ref_len = R.code_length(ref) if ref else R.group_median_length([tr.turns[0].code for tr in group])
        limit = timeout_s if timeout_s is not None else problem.time_limit_s
        for tr in group:
            turns, scores = [], []
            for turn in tr.turns:
                scored = score_execution(problem, turn.code, turn.reply, turn.results, len(turn.completion_ids),
                                         weights=weights, normalize=normalize, time_limit_s=limit,
                                         reference_length=ref_len, prompt_style=prompt_style,
                                         overlong=overlong if soft else None, max_new_tokens=max_new_tokens,
                                         penalize_flags=penalize_flags)
                scores.append(scored)
                turns.append({"reply": turn.reply, "code": turn.code, "feedback": turn.feedback,
                              "result": turn.results[0], "reward": scored.reward, "rewards": scored.rewards,
                              "truncated": turn.truncated, "flags": list(scored.flags),
                              "overlong_penalty": scored.overlong_penalty})
            last, final = tr.turns[-1], scores[-1]
            flags = tuple(dict.fromkeys(f for s in scores for f in s.flags))
            penalized = tuple(dict.fromkeys(f for s in scores for f in s.penalized_flags))
            records.append(CandidateRecord(
                problem_id=problem.id, group=g, text=last.reply, code=last.code, result=last.results[0],
                rewards=final.rewards, reward=0.0 if penalized else final.reward, passed=final.passed,
                truncated=last.truncated, overlong_penalty=final.overlong_penalty, flags=flags,
                penalized_flags=penalized, turns=turns))
    totals = torch.tensor([r.reward for r in records], dtype=torch.float32)
    return Rollout(problems=list(problems), candidates=records, batch=batch,
                   rewards=totals.view(len(problems), group_size),  # (P, K)
                   generated_tokens=batch.num_generated_tokens, time_generate_s=time_generate_s,
                   time_sandbox_s=time_sandbox_s)


def feedback_token_budget(feedback: Any, sampling: Any) -> int:
    """A generous bound on one feedback message's tokens (one character a token, plus the chat markup):
    what a later turn's prompt adds besides the previous reply, for sizing an engine's context."""
    from training.feedback import MAX_INPUT_CHARS, MAX_TEST_CHARS

    chars = 400 + feedback.tests_shown * (2 * MAX_TEST_CHARS + MAX_INPUT_CHARS + 60) + feedback.stderr_chars
    if feedback.include_code:
        chars += 8 * sampling.max_new_tokens  # the code is at most the reply, a few characters a token
    return chars


def engine_prompt_tokens(tokenizer: Any, problems: Sequence[Any], sampling: Any, feedback: Any) -> int:
    """The longest prompt an engine may be sent for ``problems``: the longest turn-1 prompt, plus, with
    ``sampling.turns > 1``, every earlier turn's reply and feedback (``feedback_token_budget``). Sizes a
    vLLM server's context (``vllm.max_model_len`` null), whose requests past it are refused."""
    longest = max(len(tokenizer(build_prompt(p, tokenizer, sampling.prompt_style, sampling.thinking))["input_ids"])
                  for p in problems)
    later = (sampling.turns - 1) * (sampling.max_new_tokens + feedback_token_budget(feedback, sampling))
    return longest + later


def turn_metrics(candidates: Sequence[CandidateRecord], turns: int) -> dict[str, float]:
    """``pass@1/turn1``, ``pass@1/final``, ``repair/rate`` (of the trajectories failing at turn 1, the
    share passing by their last turn; 0 when none failed), ``turns/mean`` and ``reward/turn<t>`` (mean
    reward of the turn-``t`` attempts, over the trajectories that reached turn ``t``; absent when none did)."""
    n = max(len(candidates), 1)
    failed_first = [c for c in candidates if not c.passed_first_turn]
    metrics = {"pass@1/turn1": sum(c.passed_first_turn for c in candidates) / n,
               "pass@1/final": sum(c.passed for c in candidates) / n,
               "repair/rate": sum(c.passed for c in failed_first) / len(failed_first) if failed_first else 0.0,
               "turns/mean": sum(len(c.turn_rewards) for c in candidates) / n}
    for t in range(turns):
        reached = [c.turn_rewards[t] for c in candidates if len(c.turn_rewards) > t]
        if reached:  # a turn no trajectory reached has no reward to average (not 0)
            metrics[f"reward/turn{t + 1}"] = sum(reached) / len(reached)
    return metrics
