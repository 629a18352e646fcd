"""Reward-hacking flags in training: `flags/<name>` step metrics and `reward.penalize_flags`."""

import pytest
import torch

from sandbox import flags as sandbox_flags
from tests.training.conftest import tiny_run_config
from training import rewards as R
from training.config import ConfigError, config_from_dict, config_to_dict
from training.events import read_events
from training.generation import GenerationBatch
from training.rollout import score_rollout
from training.trainer import _rollout_metrics, train


class _Problem:
    def __init__(self, pid):
        self.id, self.kind, self.entry_point = pid, "function", "f"
        self.reference_solution, self.time_limit_s = "def f(x):\n    return x\n", 2.0


def _batch(n: int) -> GenerationBatch:
    return GenerationBatch(prompt_ids=[[1]] * n, completion_ids=[[2, 3]] * n, texts=["    return x\n"] * n,
                           prompt_index=[i // 2 for i in range(n)], finish_reasons=["eos"] * n,
                           generated_tokens=[2] * n)


def _result(*flags, status="passed"):
    return {"status": status, "tests_passed": 1, "tests_total": 1, "syntax_ok": True, "format_ok": True,
            "wall_time_s": 0.01, "flags": list(flags)}


# Two problems, two candidates each; candidate 1 spoofs, candidate 2 exits on its second execution only.
RESULTS = [[_result(), _result()], [_result("spoofed_output"), _result("spoofed_output")],
           [_result(), _result("exit_before_tests", status="error")], [_result(), _result()]]


def _score(penalize=()):
    problems = [_Problem("a"), _Problem("b")]
    codes = ["def f(x):\n    return x\n"] * 4
    return score_rollout(problems, _batch(4), codes, RESULTS, group_size=2, penalize_flags=penalize)


def test_without_penalize_flags_flagged_candidates_keep_their_reward():
    rollout = _score()
    assert [c.flags for c in rollout.candidates] == [(), ("spoofed_output",), ("exit_before_tests",), ()]
    assert rollout.candidates[1].reward == pytest.approx(rollout.candidates[0].reward)
    assert all("penalized_flags" not in c.event_dict() for c in rollout.candidates)


def test_a_penalized_flag_sets_the_total_reward_to_zero_and_keeps_the_dimensions():
    plain, penalized = _score(), _score(penalize=("spoofed_output", "exit_before_tests"))
    assert [c.reward for c in penalized.candidates] == [plain.candidates[0].reward, 0.0, 0.0,
                                                        plain.candidates[3].reward]
    assert penalized.rewards.tolist() == [[plain.candidates[0].reward, 0.0], [0.0, plain.candidates[3].reward]]
    assert penalized.candidates[1].rewards == plain.candidates[1].rewards
    # a flag of any repeated execution counts
    assert penalized.candidates[2].event_dict()["penalized_flags"] == ["exit_before_tests"]


def test_only_the_named_flags_are_penalized():
    rollout = _score(penalize=("broad_except",))
    assert [c.reward for c in rollout.candidates] == [c.reward for c in _score().candidates]


def test_penalized_flags_is_pure():
    assert R.penalized_flags([_result("broad_except"), _result("spoofed_output")],
                             ["spoofed_output", "patches_runtime"]) == ["spoofed_output"]
    assert R.penalized_flags([{"status": "passed"}], ["spoofed_output"]) == []
    assert R.penalized_flags([_result("spoofed_output")], []) == []


def test_step_metrics_count_the_candidates_carrying_each_flag():
    metrics = _rollout_metrics(_score(), torch.zeros(2, dtype=torch.bool))
    assert {k: v for k, v in metrics.items() if k.startswith("flags/")} == {
        "flags/exit_before_tests": 1, "flags/spoofed_output": 1, "flags/patches_runtime": 0,
        "flags/inspects_tests": 0, "flags/hardcoded_outputs": 0, "flags/broad_except": 0}


def test_penalize_flags_defaults_to_none_and_round_trips():
    assert config_from_dict({}).reward.penalize_flags == ()
    cfg = config_from_dict({"reward": {"penalize_flags": ["broad_except", "patches_runtime"]}})
    assert config_to_dict(cfg)["reward"]["penalize_flags"] == ["broad_except", "patches_runtime"]
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_an_unknown_flag_name_is_rejected_with_the_valid_ones():
    with pytest.raises(ConfigError) as exc:
        config_from_dict({"reward": {"penalize_flags": ["broad_except", "cheating"]}})
    assert exc.value.field == "reward.penalize_flags"
    assert "'cheating'" in str(exc.value)
    assert all(name in str(exc.value) for name in sandbox_flags.VOCABULARY)


def test_a_run_reports_flag_counts_and_zeroes_penalized_rewards(tmp_path, tiny_model_dir, train_problems_file,
                                                                runner, monkeypatch):
    # The tiny model writes no hacks, so the detector (it runs in this process) flags every candidate.
    monkeypatch.setattr(sandbox_flags, "detect", lambda problem, code, result: ["spoofed_output"])
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1},
                          reward={"penalize_flags": ["spoofed_output"]})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    metrics = next(e for e in events if e["event"] == "step")["metrics"]
    assert metrics["flags/spoofed_output"] == metrics["candidates"] == 8
    assert metrics["flags/broad_except"] == 0 and metrics["reward/mean"] == 0.0
    cands = [c for e in events if e["event"] == "problem" for c in e["candidates"]]
    assert all(c["reward"] == 0.0 and c["result"]["flags"] == ["spoofed_output"] for c in cands)
    assert all(c["penalized_flags"] == ["spoofed_output"] for c in cands)
