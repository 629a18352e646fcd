"""Dynamic sampling's accounting with a scripted scorer (each problem's group rewards fixed in a table),
its deterministic draws, the merge of rounds, and the trainer with it on, on both tiny architectures."""

import json

import pytest
import torch

from tests.training.conftest import tiny_run_config
from training.candidates import CandidateRecord, Rollout
from training.dynamic_sampling import (SURPLUS, ZERO_VARIANCE, draw_more, merge_rollouts, round_size,
                                       sample_informative)
from training.events import read_events
from training.generation import GenerationBatch

K = 2
INFORMATIVE, FLAT = [1.0, 0.0], [0.5, 0.5]


class _Problem:
    def __init__(self, index):
        self.id = f"p{index}"


def _rollout(indices, table):
    """What scoring ``indices`` gives when problem i's group gets the rewards ``table[i]``."""
    rewards, cands, batch = [], [], GenerationBatch([], [], [], [], [], [], prompts=[f"prompt {i}" for i in indices])
    for g, i in enumerate(indices):
        rewards.append(table[i])
        for j, r in enumerate(table[i]):
            cands.append(CandidateRecord(problem_id=f"p{i}", group=g, text=f"{i}.{j}", code=f"c{i}.{j}", result={},
                                         rewards={"pass_rate": r}, reward=r, passed=r == 1.0))
            batch.prompt_ids.append([i])
            batch.completion_ids.append([i, j, 7][:2 + j])
            batch.texts.append(f"{i}.{j}")
            batch.prompt_index.append(g)
            batch.finish_reasons.append("eos")
            batch.generated_tokens.append(2 + j)
            batch.sampler_logprobs.append([-0.5] * (2 + j))
    return Rollout(problems=[_Problem(i) for i in indices], candidates=cands, batch=batch,
                   rewards=torch.tensor(rewards), generated_tokens=batch.num_generated_tokens,
                   time_generate_s=1.0, time_sandbox_s=0.5)


def _sample(table, first, *, per_step, max_rounds, seed=0, step=1):
    calls = []

    def roll(indices, round_):
        calls.append((round_, list(indices)))
        return _rollout(indices, table)

    batch = sample_informative(first, per_step=per_step, max_rounds=max_rounds, num_problems=len(table), seed=seed,
                               step=step, roll=roll)
    return batch, calls


def test_an_informative_first_round_is_the_whole_step():
    table = [INFORMATIVE] * 6
    batch, calls = _sample(table, [4, 1, 2], per_step=3, max_rounds=3)
    assert calls == [(1, [4, 1, 2])]
    assert batch.metrics() == {"sampling/groups_sampled": 3, "sampling/groups_kept": 3, "sampling/rounds": 1}
    assert [p.id for p in batch.kept().problems] == ["p4", "p1", "p2"]


def test_zero_variance_groups_are_set_aside_and_the_deficit_is_drawn_from_undrawn_problems():
    # p0-p3 flat, the rest informative; round 1 gets one informative group of four.
    table = [FLAT] * 4 + [INFORMATIVE] * 8
    batch, calls = _sample(table, [0, 1, 2, 4], per_step=4, max_rounds=3)
    # deficit 3 over an informative share of 1/4 = 12, capped at problems_per_step
    assert calls[1] == (2, draw_more(12, [0, 1, 2, 4], 4, seed=0, step=1, round_=2))
    assert not set(calls[1][1]) & {0, 1, 2, 4}
    drawn_flat = sum(i < 4 for i in calls[1][1])  # at most p3 is still flat and undrawn
    kept_after_2 = 1 + 4 - drawn_flat
    assert len(calls) == (2 if kept_after_2 >= 4 else 3)
    m = batch.metrics()
    assert m["sampling/groups_kept"] == 4 and m["sampling/rounds"] == len(calls)
    assert m["sampling/groups_sampled"] == sum(len(idx) for _, idx in calls)
    reasons = {g.problem_index: g.set_aside for g in batch.groups}
    assert all(reasons[i] == ZERO_VARIANCE for i in reasons if i < 4)
    # informative groups past the quota are surplus, kept ones are the first four informative in draw order
    informative = [g.problem_index for g in batch.groups if not g.zero_variance]
    assert [g.problem_index for g in batch.kept_groups] == informative[:4]
    assert all(reasons[i] == SURPLUS for i in informative[4:])


def test_exact_accounting_over_three_rounds():
    # 10 problems, only p9 informative. Round 1 (p0, p1) finds none, so round 2 draws problems_per_step;
    # round 3 draws 2 either way (nothing found: problems_per_step; p9 found: deficit 1 over a share of
    # 1/4 = 4, capped at problems_per_step).
    table = [FLAT] * 9 + [INFORMATIVE]
    batch, calls = _sample(table, [0, 1], per_step=2, max_rounds=3, seed=5, step=7)
    assert [r for r, _ in calls] == [1, 2, 3]
    assert calls[1][1] == draw_more(10, [0, 1], 2, seed=5, step=7, round_=2)
    assert calls[2][1] == draw_more(10, [0, 1] + calls[1][1], 2, seed=5, step=7, round_=3)
    found = 9 in calls[1][1] + calls[2][1]
    assert batch.metrics() == {"sampling/groups_sampled": 6, "sampling/groups_kept": int(found), "sampling/rounds": 3}
    assert [g.problem_index for g in batch.groups] == [0, 1] + calls[1][1] + calls[2][1]


def test_no_informative_group_in_any_round_leaves_nothing_to_update():
    batch, calls = _sample([FLAT] * 10, [3, 4], per_step=2, max_rounds=4)
    assert len(calls) == 4 and batch.kept() is None
    assert batch.metrics() == {"sampling/groups_sampled": 8, "sampling/groups_kept": 0, "sampling/rounds": 4}
    assert all(g.set_aside == ZERO_VARIANCE for g in batch.groups)
    assert len(batch.sampled().problems) == 8 and len({p.id for p in batch.sampled().problems}) == 8


def test_rounds_stop_when_every_train_problem_was_drawn():
    batch, calls = _sample([FLAT] * 3, [0, 1], per_step=2, max_rounds=5)
    assert [len(idx) for _, idx in calls] == [2, 1]  # the one problem left, then nothing to draw
    assert batch.metrics() == {"sampling/groups_sampled": 3, "sampling/groups_kept": 0, "sampling/rounds": 2}


def test_max_rounds_one_only_filters():
    batch, calls = _sample([FLAT, INFORMATIVE, FLAT], [0, 1], per_step=2, max_rounds=1)
    assert len(calls) == 1 and batch.metrics()["sampling/groups_kept"] == 1
    assert [p.id for p in batch.kept().problems] == ["p1"]


def test_a_stop_request_during_a_round_ends_the_step():
    def roll(indices, round_):
        return None if round_ == 2 else _rollout(indices, [FLAT] * 6)

    assert sample_informative([0, 1], per_step=2, max_rounds=3, num_problems=6, seed=0, step=1, roll=roll) is None


def test_round_size_draws_the_deficit_over_the_informative_share():
    assert round_size(per_step=8, kept=8, sampled=8, undrawn=100) == 0
    assert round_size(per_step=8, kept=0, sampled=8, undrawn=100) == 8  # nothing informative yet
    assert round_size(per_step=8, kept=6, sampled=8, undrawn=100) == 3  # 2 / 0.75 -> 3
    assert round_size(per_step=8, kept=1, sampled=8, undrawn=100) == 8  # 7 / (1/8) = 56, capped
    assert round_size(per_step=8, kept=4, sampled=8, undrawn=2) == 2  # only 2 left


def test_draws_are_a_pure_function_of_seed_step_and_round_and_skip_drawn_problems():
    a = draw_more(50, [1, 2, 3], 10, seed=1, step=4, round_=2)
    assert a == draw_more(50, [1, 2, 3], 10, seed=1, step=4, round_=2)
    assert len(set(a)) == 10 and not set(a) & {1, 2, 3}
    assert a != draw_more(50, [1, 2, 3], 10, seed=1, step=5, round_=2)
    assert a != draw_more(50, [1, 2, 3], 10, seed=1, step=4, round_=3)
    assert a != draw_more(50, [1, 2, 3], 10, seed=2, step=4, round_=2)
    assert sorted(draw_more(5, [0, 4], 10, seed=0, step=1, round_=2)) == [1, 2, 3]


def test_merging_keeps_each_groups_candidates_tokens_and_rewards_together():
    table = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
    one, two = _rollout([0, 1], table), _rollout([2], table)
    merged = merge_rollouts([(two, 0), (one, 1)])
    assert [p.id for p in merged.problems] == ["p2", "p1"]
    assert torch.allclose(merged.rewards, torch.tensor([[0.5, 0.6], [0.3, 0.4]]))  # (P, K)
    assert [(c.problem_id, c.group, c.reward) for c in merged.candidates] == [
        ("p2", 0, 0.5), ("p2", 0, 0.6), ("p1", 1, 0.3), ("p1", 1, 0.4)]
    b = merged.batch
    assert b.texts == ["2.0", "2.1", "1.0", "1.1"] and b.prompt_index == [0, 0, 1, 1]
    assert b.prompts == ["prompt 2", "prompt 1"] and b.completion_ids == [[2, 0], [2, 1, 7], [1, 0], [1, 1, 7]]
    assert merged.generated_tokens == 10 and len(b.sampler_logprobs) == 4
    assert merged.time_generate_s == 2.0  # both rounds' generation
    padded = b.padded(pad_token_id=0)
    assert padded["prompt_index"].tolist() == [0, 0, 1, 1] and padded["completion_mask"].sum().item() == 10


# ---- the trainer with sampling.dynamic on ---------------------------------------------------------

class ScriptedRunner:
    """The sandbox's verdicts scripted by problem: ``never-*`` always fails; any other problem passes
    for every other candidate of a batch (so its group of an even size is always informative)."""

    def submit_batch(self, problems, candidates):
        from concurrent.futures import Future

        done = Future()
        done.set_result(self.run_batch(problems, candidates))
        return done

    def run_batch(self, problems, candidates):
        from sandbox.result import ExecutionResult, TestResult

        out = []
        for i, cand in enumerate(candidates):
            ok = not cand.problem_id.startswith("never") and i % 2 == 0
            out.append(ExecutionResult(status="passed" if ok else "failed",
                                       tests=[TestResult(name="t", passed=ok, error=None if ok else "AssertionError")],
                                       isolation="scripted"))
        return out


def _problems(tmp_path, never, solvable):
    rows = [{"id": f"never-{i}", "kind": "function", "prompt": f"def f{i}(x):\n", "entry_point": f"f{i}",
             "tests": ["assert False"], "split": "train"} for i in range(never)]
    rows += [{"id": f"ok-{i}", "kind": "function", "prompt": f"def g{i}(x):\n", "entry_point": f"g{i}",
              "tests": ["assert True"], "split": "train"} for i in range(solvable)]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in rows))
    return path


PASS_ONLY = {"weights": {"pass_rate": 1.0, "syntax": 0.0, "efficiency": 0.0, "conciseness": 0.0, "format": 0.0}}


def test_the_trainer_updates_on_informative_groups_and_reports_every_round(tmp_path, tiny_model_dir):
    from training.trainer import train

    cfg = tiny_run_config(tiny_model_dir, _problems(tmp_path, never=4, solvable=4), reward=PASS_ONLY,
                          sampling={"dynamic": True, "max_rounds": 3}, train={"steps": 3})
    assert train(cfg, tmp_path / "run", runner=ScriptedRunner(), progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    for step in (1, 2, 3):
        m = next(e for e in events if e["event"] == "step" and e["step"] == step)["metrics"]
        problems = [e for e in events if e["event"] == "problem" and e["step"] == step]
        assert m["sampling/groups_sampled"] == len(problems) == len({p["problem_id"] for p in problems})
        assert m["sampling/groups_kept"] == 2 == sum(p["used"] for p in problems)  # 4 solvable problems: always enough
        assert 1 <= m["sampling/rounds"] == max(p["round"] for p in problems) <= 3
        assert m["zero_variance_groups"] == sum(p["zero_variance"] for p in problems)
        assert m["candidates"] == 4 * len(problems)
        for p in problems:
            never = p["problem_id"].startswith("never")
            assert p["zero_variance"] is never and p["used"] is (p.get("set_aside") is None)
            assert p.get("set_aside") in ((ZERO_VARIANCE,) if never else (None, SURPLUS))
        assert all(p["round"] == m["sampling/rounds"] for p in problems if p.get("set_aside") == SURPLUS)
        assert m["grad_norm"] > 0
    rounds = [next(e for e in events if e["event"] == "step" and e["step"] == s)["metrics"]["sampling/rounds"]
              for s in (1, 2, 3)]
    assert max(rounds) > 1  # seed 0 puts a never-solved problem into some step's first round


def test_without_an_informative_group_the_step_is_reported_but_nothing_changes(tmp_path, tiny_model_dir):
    from tests.training.conftest import lora_state, make_trainer

    cfg = tiny_run_config(tiny_model_dir, _problems(tmp_path, never=5, solvable=0), reward=PASS_ONLY,
                          sampling={"dynamic": True, "max_rounds": 2}, train={"steps": 1})
    trainer = make_trainer(cfg, tmp_path / "run", ScriptedRunner())
    before = lora_state(trainer.policy.model)
    trainer.run()
    events = read_events(tmp_path / "run" / "events.jsonl")
    m = next(e for e in events if e["event"] == "step")["metrics"]
    assert m["sampling/groups_sampled"] == 4 and m["sampling/groups_kept"] == 0 and m["sampling/rounds"] == 2
    assert m["grad_norm"] == 0.0 and m["zero_variance_groups"] == 4
    problems = [e for e in events if e["event"] == "problem"]
    assert len(problems) == 4 and not any(p["used"] for p in problems)
    assert [p["round"] for p in problems] == [1, 1, 2, 2]
    after = lora_state(trainer.policy.model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_dynamic_sampling_refuses_several_processes(tmp_path, qwen3_model_dir):
    from accelerate import Accelerator

    from training.events import EventWriter
    from training.trainer import StopSignal, Trainer

    class TwoProcesses(Accelerator):
        num_processes = 2

    cfg = tiny_run_config(qwen3_model_dir, _problems(tmp_path, never=1, solvable=2), sampling={"dynamic": True})
    with pytest.raises(ValueError, match="sampling.dynamic: true runs on one process"):
        Trainer(cfg, tmp_path, TwoProcesses(cpu=True), EventWriter(tmp_path / "events.jsonl"),
                StopSignal(tmp_path / "STOP"))


def test_the_config_validates_max_rounds():
    from training.config import ConfigError, config_from_dict

    cfg = config_from_dict({"sampling": {"dynamic": True}})
    assert cfg.sampling.dynamic is True and cfg.sampling.max_rounds == 3
    with pytest.raises(ConfigError, match="sampling.max_rounds: must be >= 1"):
        config_from_dict({"sampling": {"max_rounds": 0}})


def test_the_trainers_notion_of_a_flat_group_decides_what_is_set_aside():
    table = [FLAT, FLAT, INFORMATIVE, INFORMATIVE]
    calls = []

    def roll(indices, round_):
        calls.append((round_, list(indices)))
        return _rollout(indices, table)

    # e.g. discounted per-turn credit: a group whose final rewards are equal can still carry signal
    batch = sample_informative([0, 1], per_step=2, max_rounds=3, num_problems=4, seed=0, step=1, roll=roll,
                               zero_variance=lambda r: torch.zeros(len(r.problems), dtype=torch.bool))
    assert calls == [(1, [0, 1])] and batch.metrics()["sampling/groups_kept"] == 2
