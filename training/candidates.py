"""What a sampled candidate is once executed and scored: its record, a step's rollout, one attempt's rewards,
and what of a reply goes to the sandbox. Shared by the one-turn rollout (rollout.py) and repair trajectories
(turns.py), which import it; it imports neither."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from training import rewards as R
from training.advantages import group_rewards
from training.generation import GenerationBatch, answer_after_thinking

@dataclass
class CandidateRecord:
    """One sampled candidate, its execution and its rewards."""

    problem_id: str
    group: int
    """Index of its problem in the step (rows of ``Rollout.rewards``)."""
    text: str
    """The generated completion / reply (after stop-string cut)."""
    code: str
    """The program that was executed."""
    result: dict
    """Execution result (documented JSON) of the first execution."""
    rewards: dict[str, float]
    reward: float
    """Combined reward (weighted, before advantages)."""
    passed: bool
    """Every test ran and passed (first execution)."""
    truncated: bool = False
    """Generation hit ``max_new_tokens`` (no EOS, no stop string): the answer may be cut off."""
    overlong_penalty: float = 0.0
    """``reward.overlong: soft``: the length penalty included in ``reward`` (in [-1, 0])."""
    flags: tuple[str, ...] = ()
    """Reward-hacking flags carried by any of its executions (sandbox/flags.py vocabulary)."""
    penalized_flags: tuple[str, ...] = ()
    """Those of ``flags`` named by ``reward.penalize_flags``: they set ``reward`` to 0."""
    reward_normalized: float | None = None
    """``reward.normalize: per_component``: what the advantage estimator saw, each dimension normalized within
    the group before the weighting (``advantages.group_rewards``); None (not in events) with ``sum``."""
    turns: list[dict] | None = None
    """Multi-turn repair (``sampling.turns > 1``): every turn, ``{reply, code, feedback, result, reward,
    rewards, truncated, flags, overlong_penalty}`` (``feedback``: the message the model was sent after that
    turn, null on the last; ``reward``: the turn's own total, with its own overlong penalty, 0 with a
    penalised flag); the record's own fields are the last turn's. None for a one-turn candidate."""

    def event_dict(self) -> dict:
        out = {"code": self.code, "reward": self.reward, "rewards": self.rewards, "result": self.result,
               "truncated": self.truncated}
        if self.overlong_penalty:
            out["overlong_penalty"] = self.overlong_penalty
        if self.penalized_flags:
            out["penalized_flags"] = list(self.penalized_flags)
        if self.reward_normalized is not None:
            out["reward_normalized"] = self.reward_normalized
        if self.turns is not None:
            out["turns"] = self.turns
        return out

    @property
    def turn_rewards(self) -> list[float]:
        """Each turn's reward, in order (one entry for a one-turn candidate)."""
        return [t["reward"] for t in self.turns] if self.turns else [self.reward]

    @property
    def passed_first_turn(self) -> bool:
        return self.turns[0]["result"].get("status") == "passed" if self.turns else self.passed


@dataclass
class Rollout:
    problems: list[Any]
    """The step's problems (``sandbox.Problem``), in group order."""
    candidates: list[CandidateRecord]
    """``len(problems) * K`` candidates, grouped by problem (group-major)."""
    batch: GenerationBatch
    """The sampled token ids, same order as ``candidates``."""
    rewards: torch.Tensor
    """Combined rewards grouped per problem. (P, K)"""
    generated_tokens: int
    time_generate_s: float
    time_sandbox_s: float


def normalized_rewards(rollout: Rollout, reward: Any) -> torch.Tensor:
    """``reward.normalize: per_component``: the rollout's rewards as the advantage estimator sees them
    (``advantages.group_rewards`` on each candidate's dimensions, overlong penalty and penalized flags), also
    stored as each candidate's ``reward_normalized``. ``reward`` is the run's ``RewardConfig``. -> (P, K)"""
    cands = rollout.candidates
    values = group_rewards(reward.normalize, [c.rewards for c in cands], reward.weights.as_dict(),
                           rollout.rewards.shape[1], mean=reward.weighted_mean,
                           penalties=[c.overlong_penalty for c in cands],
                           penalized=[bool(c.penalized_flags) for c in cands])  # (P, K)
    for c, value in zip(cands, values.flatten().tolist()):
        c.reward_normalized = value
    return values


@dataclass
class ExecutionScore:
    """One attempt's rewards (a one-turn candidate, or one turn of a trajectory)."""

    rewards: dict[str, float]
    reward: float
    """Total: the combined dimensions plus the overlong penalty, or 0 with a penalized flag."""
    passed: bool
    overlong_penalty: float
    flags: tuple[str, ...]
    penalized_flags: tuple[str, ...]


def score_execution(problem: Any, code: str, text: str, results: Sequence[dict], num_tokens: int, *,
                    weights: Mapping[str, float], normalize: bool, time_limit_s: float,
                    reference_length: float | None, prompt_style: str, overlong: Any, max_new_tokens: int | None,
                    penalize_flags: Sequence[str]) -> ExecutionScore:
    """The rewards of one attempt from its executions (``repeats``: averaged). ``overlong`` is the
    ``OverlongConfig`` when its soft length penalty applies (None: no penalty); ``num_tokens`` the
    attempt's sampled tokens."""
    contexts = [
        R.RewardContext(code=code, result=res, text=text, prompt_style=prompt_style, kind=problem.kind,
                        entry_point=problem.entry_point, time_limit_s=time_limit_s,
                        reference_length=reference_length)
        for res in results
    ]
    score = R.score_candidate(contexts, weights, normalize)
    penalty = R.overlong_penalty(num_tokens, max_new_tokens, overlong.buffer_tokens) if overlong is not None else 0.0
    carried = tuple(dict.fromkeys(f for res in results for f in (res.get("flags") or ())))
    penalized = tuple(R.penalized_flags(results, penalize_flags))
    return ExecutionScore(rewards=score.rewards, reward=R.total_reward(score.total, penalty, penalized),
                          passed=results[0].get("status") == "passed", overlong_penalty=penalty, flags=carried,
                          penalized_flags=penalized)


def sandbox_reply(text: str, thinking: bool) -> str:
    """What of a chat reply goes to the sandbox. Without thinking: the reply (the sandbox takes its
    first fenced block). With thinking: the answer after the last ``</think>``, reduced to its *last*
    fenced block (a thinking model drafts code while it reasons and writes the final version last);
    a reply whose thinking never closed has no answer and gets an empty reply (no code)."""
    if not thinking:
        return text
    answer = answer_after_thinking(text)
    if answer is None:
        return ""
    blocks = _FENCED_BLOCK.findall(answer)
    if not blocks:
        return answer  # no fence: the sandbox runs the answer as is and the format reward says so
    return f"```python\n{blocks[-1]}```\n"


_FENCED_BLOCK = re.compile(r"^[ \t]{0,3}```[^\n`]*\n(.*?)^[ \t]{0,3}```[ \t]*$", re.MULTILINE | re.DOTALL)


def sandbox_candidate(candidate_cls: Any, problem: Any, text: str, prompt_style: str) -> Any:
    """The ``sandbox.Candidate`` (``candidate_cls``) of an answer: a chat reply or a completion."""
    if prompt_style == "chat":
        return candidate_cls(problem_id=problem.id, reply=text)
    return candidate_cls(problem_id=problem.id, completion=text)


def assembled_code(problem: Any, text: str, prompt_style: str) -> str:
    """The whole program the sandbox runs for an answer (what a candidate's record shows as ``code``)."""
    from sandbox.candidate import assemble

    if prompt_style == "chat":
        return assemble(problem, reply=text).code
    return assemble(problem, completion=text).code


def result_dict(result: Any) -> dict:
    """An execution result as its documented JSON object (an ``ExecutionResult`` or already a dict)."""
    if isinstance(result, Mapping):
        return dict(result)
    return result.to_dict()
