"""Dynamic sampling (DAPO, Yu et al. 2025, section 3.2): keep every step's batch informative.

A group whose candidates all got the same reward has a zero advantage for every candidate (GRPO,
RLOO, Dr. GRPO alike): it costs a group of generation and sandbox time and moves nothing. With
``sampling.dynamic`` a step samples in rounds:

1. round 1 rolls out the step's own ``problems_per_step`` problems (``pick_problems``: exactly those a
   run without dynamic sampling gets);
2. after scoring, zero-variance groups are set aside; while fewer than ``problems_per_step``
   informative groups exist and rounds are left (``max_rounds``, the first included), round r draws
   more train problems that this step has not drawn yet: the deficit divided by the share of groups
   that were informative so far (so one round usually fills it), at most ``problems_per_step`` (a
   round is never bigger than a plain step) and at most what is left undrawn;
3. the update uses the first ``problems_per_step`` informative groups in draw order. Informative
   groups beyond that are set aside as ``surplus``; when the rounds run out with fewer, the update
   uses the ones found, and with none the step makes no optimizer step (its metrics and groups are
   still reported; the learning-rate schedule still advances, as for a step whose groups were all
   dropped by ``ppo.drop_zero_variance_groups``).

Determinism: round r's problems are a pure function of (seed, step, r, the problems drawn before it
in the step) and its generator seed one of (seed, step, r); so a resumed run, whose weights equal the
uninterrupted run's, draws and samples exactly what that run did.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from training.advantages import zero_variance_groups
from training.candidates import Rollout
from training.generation import GenerationBatch

ZERO_VARIANCE = "zero_variance"
"""Set-aside reason: every candidate of the group got the same reward."""
SURPLUS = "surplus"
"""Set-aside reason: informative, but the step already had ``problems_per_step`` informative groups."""


def round_size(per_step: int, kept: int, sampled: int, undrawn: int) -> int:
    """Problems to draw in the next round: the deficit over the informative share so far (all of
    ``per_step`` when nothing was informative yet), capped at ``per_step`` and at ``undrawn``."""
    need = per_step - kept
    if need <= 0:
        return 0
    wanted = per_step if kept == 0 else math.ceil(need * sampled / kept)
    return max(0, min(wanted, per_step, undrawn))


def draw_more(num_problems: int, drawn: Sequence[int], count: int, seed: int, step: int, round_: int) -> list[int]:
    """``count`` train-problem indices not in ``drawn``, in a permutation seeded by (seed, step, round).

    A string seed: ``random.Random`` hashes it with SHA-512, the same in every process and Python run.
    """
    order = list(range(num_problems))
    random.Random(f"crucible-dynamic-sampling:{seed}:{step}:{round_}").shuffle(order)
    taken = set(drawn)
    return [i for i in order if i not in taken][:max(0, count)]


@dataclass
class GroupRef:
    """One sampled group: which round's rollout it is in, its row there, and what became of it."""

    round: int
    """1-based round of the step."""
    group: int
    """Its group index in that round's rollout."""
    problem_index: int
    """Index into the run's train problems."""
    zero_variance: bool
    set_aside: str | None = None
    """None: used by the update; else ``zero_variance`` or ``surplus``."""


@dataclass
class DynamicBatch:
    """What a step's rounds sampled, which groups the update uses and which were set aside."""

    rollouts: list[Rollout]
    """One per round, in round order."""
    groups: list[GroupRef] = field(default_factory=list)
    """Every sampled group, in draw order (round, then group)."""

    @property
    def kept_groups(self) -> list[GroupRef]:
        return [g for g in self.groups if g.set_aside is None]

    def metrics(self) -> dict[str, int]:
        return {"sampling/groups_sampled": len(self.groups), "sampling/groups_kept": len(self.kept_groups),
                "sampling/rounds": len(self.rollouts)}

    def kept(self) -> Rollout | None:
        """The groups the update uses, as one rollout (group order = draw order); None when none."""
        kept = self.kept_groups
        return merge_rollouts([(self.rollouts[g.round - 1], g.group) for g in kept]) if kept else None

    def sampled(self) -> Rollout:
        """Every sampled group as one rollout, in draw order (for the step's metrics and problem events)."""
        return merge_rollouts([(self.rollouts[g.round - 1], g.group) for g in self.groups],
                              times_from=self.rollouts)


def sample_informative(first: Sequence[int], *, per_step: int, max_rounds: int, num_problems: int, seed: int,
                       step: int, roll: Callable[[list[int], int], Rollout | None],
                       zero_variance: Callable[[Rollout], torch.Tensor] | None = None) -> DynamicBatch | None:
    """Run rounds of ``roll(problem_indices, round) -> Rollout`` (None: stop requested, and so is the
    result) until ``per_step`` informative groups exist or ``max_rounds`` rounds ran or no train
    problem is left undrawn. ``first``: round 1's problems (the step's own pick). ``zero_variance(rollout)
    -> (P,) bool`` says which groups carry no signal (default: all candidates got one reward)."""
    zero_variance = zero_variance or (lambda r: zero_variance_groups(r.rewards))
    batch = DynamicBatch(rollouts=[])
    drawn: list[int] = []
    informative = 0
    indices = list(first)
    for round_ in range(1, max_rounds + 1):
        if round_ > 1:
            count = round_size(per_step, informative, len(batch.groups), num_problems - len(drawn))
            if count == 0:
                break
            indices = draw_more(num_problems, drawn, count, seed, step, round_)
        rollout = roll(indices, round_)
        if rollout is None:
            return None
        if len(rollout.problems) != len(indices):
            raise RuntimeError(f"round {round_} rolled out {len(rollout.problems)} problems for {len(indices)} drawn")
        batch.rollouts.append(rollout)
        drawn += indices
        for g, zero in enumerate(zero_variance(rollout).tolist()):  # (P,)
            reason = ZERO_VARIANCE if zero else (SURPLUS if informative >= per_step else None)
            informative += not zero
            batch.groups.append(GroupRef(round_, g, indices[g], bool(zero), reason))
        if informative >= per_step:
            break
    return batch


def merge_rollouts(parts: Sequence[tuple[Rollout, int]], times_from: Sequence[Rollout] = ()) -> Rollout:
    """One rollout of the given groups ``(rollout, group index)``, renumbered 0.. in the order given.

    Candidates, token rows and reward rows move together (each group's K rows, group-major).
    ``generated_tokens`` counts the rows kept; the phase times are summed over ``times_from`` (the
    rounds, when the merge stands for all of them) or over the distinct rollouts of ``parts``.
    """
    if not parts:
        raise ValueError("merge_rollouts needs at least one group")
    k = parts[0][0].rewards.shape[1]
    problems, candidates, rewards = [], [], []
    rows: list[tuple[GenerationBatch, int, int]] = []  # (batch, row, new group)
    for new, (rollout, g) in enumerate(parts):
        problems.append(rollout.problems[g])
        rewards.append(rollout.rewards[g])  # (K,)
        candidates += [dataclasses.replace(c, group=new) for c in rollout.candidates if c.group == g]
        rows += [(rollout.batch, i, new) for i in range(g * k, (g + 1) * k)]
    with_sampler = all(len(b.sampler_logprobs) == len(b) for b, _, _ in rows)
    with_turns = all(len(b.completion_turns) == len(b) for b, _, _ in rows)
    batch = GenerationBatch(
        prompt_ids=[b.prompt_ids[i] for b, i, _ in rows], completion_ids=[b.completion_ids[i] for b, i, _ in rows],
        texts=[b.texts[i] for b, i, _ in rows], prompt_index=[new for _, _, new in rows],
        finish_reasons=[b.finish_reasons[i] for b, i, _ in rows],
        generated_tokens=[b.generated_tokens[i] for b, i, _ in rows],
        prompts=[rollout.batch.prompts[g] for rollout, g in parts],
        sampler_logprobs=[b.sampler_logprobs[i] for b, i, _ in rows] if with_sampler else [],
        completion_turns=[b.completion_turns[i] for b, i, _ in rows] if with_turns else [])
    sources = list(times_from) or list({id(r): r for r, _ in parts}.values())
    return Rollout(problems=problems, candidates=candidates, batch=batch,
                   rewards=torch.stack(rewards),  # (P, K)
                   generated_tokens=batch.num_generated_tokens,
                   time_generate_s=sum(r.time_generate_s for r in sources),
                   time_sandbox_s=sum(r.time_sandbox_s for r in sources))
