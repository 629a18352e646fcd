"""What-if re-scoring (training/rescore.py) against a brute-force recomputation in plain Python.

The brute force spells out, from the formulas in docs/design.md ("Reward") and the functions' docstrings, what training
does to a candidate's stored rewards: weighted mean (or sum), overlong penalty, 0 for a penalised flag,
the estimator per group, the clip; and Spearman's rho from ranks counted pair by pair.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from training.config import ConfigError, config_from_dict
from training.rescore import RewardSettings, StoredCandidate, average_ranks, rank_correlation, rescore, total_under

DIMS = ("pass_rate", "syntax", "efficiency", "conciseness", "format")
EPS = 1e-6  # the estimators' default


def brute_total(c: StoredCandidate, weights: dict, normalize: bool, penalize: tuple) -> float:
    if any(f in penalize for f in c.flags):
        return 0.0
    weighted = sum(w * c.rewards[d] for d, w in weights.items() if w)
    return (weighted / sum(weights.values()) if normalize else weighted) + c.overlong_penalty


def brute_advantages(rewards: list[float], estimator: str, clip: float | None) -> list[float]:
    k, mean = len(rewards), statistics.fmean(rewards)
    if estimator == "grpo":
        adv = [(r - mean) / (statistics.stdev(rewards) + EPS) for r in rewards]
    elif estimator == "dr_grpo":
        adv = [r - mean for r in rewards]
    else:  # rloo
        adv = [r - (sum(rewards) - r) / (k - 1) for r in rewards]
    return adv if clip is None else [max(-clip, min(clip, a)) for a in adv]


def brute_spearman(x: list[float], y: list[float]) -> float:
    def ranks(v):  # 1 + values below + half the other values equal to it
        return [1 + sum(o < a for o in v) + (sum(o == a for o in v) - 1) / 2 for a in v]

    rx, ry = ranks(x), ranks(y)
    if len(set(rx)) == 1 and len(set(ry)) == 1:
        return 1.0
    if len(set(rx)) == 1 or len(set(ry)) == 1:
        return 0.0
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    return (sum((a - mx) * (b - my) for a, b in zip(rx, ry))
            / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)))


def brute_sign(adv: float, group: list[float]) -> int:
    if max(group) - min(group) <= 1e-8:  # every candidate got one reward: no signal
        return 0
    return (adv > 0) - (adv < 0)


def make_candidates(seed: int | str, steps=(3, 4, 5), problems=("a", "b", "c", "d"), k=6) -> list[StoredCandidate]:
    rng = random.Random(seed)
    out = []
    for step in steps:
        for pid in problems:
            tied = rng.random() < 0.2  # a group whose candidates all have the same rewards
            base = {d: rng.choice([0.0, 0.5, 1.0, rng.random()]) for d in DIMS}
            for index in range(k):
                rewards = dict(base) if tied else {d: rng.choice([0.0, 1.0, rng.random()]) for d in DIMS}
                out.append(StoredCandidate(
                    step=step, problem_id=pid, index=index, rewards=rewards,
                    flags=("exit_before_tests",) if rng.random() < 0.1 else (),
                    overlong_penalty=-rng.random() if rng.random() < 0.1 else 0.0))
    rng.shuffle(out)  # the order they come in does not matter
    return out


def brute_rescore(candidates, before: RewardSettings, weights: dict) -> dict:
    groups: dict = {}
    for c in candidates:
        groups.setdefault((c.step, c.problem_id), []).append(c)
    per_candidate, per_group = {}, {}
    for key, cs in groups.items():
        cs = sorted(cs, key=lambda c: c.index)
        rb = [c.reward if c.reward is not None else
              brute_total(c, before.weights, before.normalize, before.penalize_flags) for c in cs]
        ra = [brute_total(c, weights, before.normalize, before.penalize_flags) for c in cs]
        ab, aa = (brute_advantages(r, before.advantage, before.clip) for r in (rb, ra))
        flips = [brute_sign(x, rb) != brute_sign(y, ra) for x, y in zip(ab, aa)]
        per_group[key] = (brute_spearman(rb, ra), sum(flips), len(cs))
        tied = (max(rb) - min(rb) <= 1e-8, max(ra) - min(ra) <= 1e-8)
        for c, *values in zip(cs, rb, ra, ab, aa, flips):
            per_candidate[(c.step, c.problem_id, c.index)] = (*values, tied)
    return {"candidates": per_candidate, "groups": per_group}


SETTINGS = [
    RewardSettings(weights=dict(zip(DIMS, (0.6, 0.15, 0.1, 0.05, 0.1))), advantage="grpo", clip=5.0),
    RewardSettings(weights=dict(zip(DIMS, (0.6, 0.15, 0.1, 0.05, 0.1))), advantage="grpo", clip=0.5,
                   penalize_flags=("exit_before_tests",)),
    RewardSettings(weights=dict(zip(DIMS, (1.0, 0.5, 0.0, 0.5, 0.2))), advantage="rloo", clip=None, normalize=False),
    RewardSettings(weights=dict(zip(DIMS, (0.6, 0.15, 0.1, 0.05, 0.1))), advantage="dr_grpo", clip=0.1),
]
NEW_WEIGHTS = [dict(zip(DIMS, w)) for w in ((1, 0, 0, 0, 0), (0.2, 0.2, 0.2, 0.2, 0.2), (0.3, 0.0, 0.6, 1.0, 0.0))]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.advantage}-clip{s.clip}-norm{s.normalize}")
@pytest.mark.parametrize("weights", NEW_WEIGHTS, ids=["pass-only", "uniform", "odd"])
def test_it_matches_a_brute_force_recomputation(settings, weights):
    candidates = make_candidates(seed=f"{settings.advantage}-{settings.clip}-{sorted(weights.items())}")
    out = rescore(candidates, settings, weights, top=100)
    expected = brute_rescore(candidates, settings, weights)

    seen = 0
    for problem in out["problems"]:
        for c in problem["candidates"]:
            rb, ra, ab, aa, flip, tied = expected["candidates"][(c["step"], problem["problem_id"], c["index"])]
            assert c["reward_before"] == pytest.approx(rb, abs=1e-12)
            assert c["reward_after"] == pytest.approx(ra, abs=1e-12)
            # The advantages are float32 tensors, as in training. In a group whose candidates all got one
            # reward the trainer's float32 group mean can miss that reward by an ulp, and GRPO divides the
            # miss by std + eps ~ 1e-6: such a group gets small nonzero advantages (no sign: see brute_sign).
            for got, want, zero_var in ((c["advantage_before"], ab, tied[0]), (c["advantage_after"], aa, tied[1])):
                if zero_var:
                    assert abs(want) < 1e-9 and abs(got) < 0.5
                else:
                    assert got == pytest.approx(want, rel=1e-4, abs=1e-4)
            assert c["sign_flip"] == flip
            seen += 1
    assert seen == len(candidates) == out["summary"]["candidates"]

    for row in out["steps"]:
        groups = [v for (step, _), v in expected["groups"].items() if step == row["step"]]
        assert row["groups"] == len(groups) == 4
        assert row["candidates"] == sum(n for _, _, n in groups)
        assert row["sign_flips"] == pytest.approx(sum(f for _, f, _ in groups) / row["candidates"])
        assert row["rank_corr"] == pytest.approx(statistics.fmean(rho for rho, _, _ in groups))
    assert [r["step"] for r in out["steps"]] == [3, 4, 5]

    for problem in out["problems"]:
        groups = [v for (_, pid), v in expected["groups"].items() if pid == problem["problem_id"]]
        assert problem["rank_corr"] == pytest.approx(statistics.fmean(rho for rho, _, _ in groups))
    corr = [p["rank_corr"] for p in out["problems"]]
    assert corr == sorted(corr), "the problems whose ranking changes most come first"


def test_the_runs_own_weights_change_nothing():
    settings = SETTINGS[1]
    stored = [StoredCandidate(**{**c.__dict__, "reward": total_under(c, settings)}) for c in make_candidates(7)]
    out = rescore(stored, settings, settings.weights)
    assert out["summary"]["sign_flips"] == 0.0 and out["summary"]["rank_corr"] == 1.0
    for problem in out["problems"]:
        for c in problem["candidates"]:
            assert c["reward_after"] == c["reward_before"] and c["advantage_after"] == c["advantage_before"]


def test_before_is_the_stored_reward_training_used():
    cs = [StoredCandidate(step=1, problem_id="p", index=i, rewards={"pass_rate": r, "syntax": 1.0}, reward=stored)
          for i, (r, stored) in enumerate([(1.0, 0.9), (0.0, 0.2), (0.5, None)])]
    before = RewardSettings(weights={"pass_rate": 0.5, "syntax": 0.5})
    out = rescore(cs, before, {"pass_rate": 1.0, "syntax": 0.0})
    rows = out["problems"][0]["candidates"]
    assert [c["reward_before"] for c in rows] == [0.9, 0.2, 0.75]  # the last recomputed under the run's weights
    assert [c["reward_after"] for c in rows] == [1.0, 0.0, 0.5]


def test_a_penalised_flag_and_the_overlong_penalty_apply_as_in_training():
    settings = RewardSettings(weights={"pass_rate": 1.0}, penalize_flags=("spoofed_output",))
    flagged = StoredCandidate(step=1, problem_id="p", index=0, rewards={"pass_rate": 1.0}, flags=("spoofed_output",))
    long = StoredCandidate(step=1, problem_id="p", index=1, rewards={"pass_rate": 1.0}, overlong_penalty=-0.25)
    assert total_under(flagged, settings) == 0.0
    assert total_under(long, settings) == 0.75


def test_a_zero_variance_group_gaining_signal_counts_as_sign_changes():
    # every candidate fails the tests alike; only conciseness tells them apart
    cs = [StoredCandidate(step=2, problem_id="p", index=i, rewards={"pass_rate": 0.0, "conciseness": c})
          for i, c in enumerate([1.0, 0.5, 0.2, 1.0])]
    before = RewardSettings(weights={"pass_rate": 1.0, "conciseness": 0.0})
    out = rescore(cs, before, {"pass_rate": 1.0, "conciseness": 0.5})
    step = out["steps"][0]
    assert step["zero_variance_before"] == 1 and step["zero_variance_after"] == 0
    assert step["sign_flips"] == 1.0  # 0 -> + or - for each of them
    assert step["rank_corr"] == 0.0  # an order appeared where there was none


def test_groups_of_one_candidate_have_no_advantage_and_are_left_out():
    cs = [StoredCandidate(step=1, problem_id="alone", index=0, rewards={"pass_rate": 1.0})]
    out = rescore(cs, RewardSettings(weights={"pass_rate": 1.0}), {"pass_rate": 1.0})
    assert out["steps"] == [] and out["problems"] == [] and out["summary"]["candidates"] == 0


def test_a_weighted_dimension_the_run_never_stored_is_an_error_naming_it():
    cs = [StoredCandidate(step=1, problem_id="p", index=i, rewards={"pass_rate": float(i)}) for i in range(2)]
    with pytest.raises(ConfigError) as info:
        rescore(cs, RewardSettings(weights={"pass_rate": 1.0}), {"pass_rate": 1.0, "format": 0.5})
    assert info.value.field == "format"
    rescore(cs, RewardSettings(weights={"pass_rate": 1.0}), {"pass_rate": 1.0, "format": 0.0})  # weight 0: fine


def test_top_keeps_the_most_changed_problems():
    out = rescore(make_candidates(3), SETTINGS[0], NEW_WEIGHTS[2], top=2)
    full = rescore(make_candidates(3), SETTINGS[0], NEW_WEIGHTS[2], top=100)
    assert [p["problem_id"] for p in out["problems"]] == [p["problem_id"] for p in full["problems"][:2]]


def test_settings_come_from_the_run_config():
    cfg = config_from_dict({"reward": {"normalize": False, "clip": None, "penalize_flags": ["broad_except"]},
                            "ppo": {"advantage": "rloo"}})
    s = RewardSettings.from_config(cfg)
    assert (s.normalize, s.clip, s.advantage, s.penalize_flags) == (False, None, "rloo", ("broad_except",))
    assert s.weights == cfg.reward.weights.as_dict()


@pytest.mark.parametrize("x,y", [([1, 2, 3, 4], [1, 2, 3, 4]), ([1, 2, 3, 4], [4, 3, 2, 1]),
                                 ([1, 1, 2, 3], [3, 1, 1, 2]), ([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]), ([2, 2], [7, 7])])
def test_rank_correlation_is_spearmans_rho_with_average_ranks(x, y):
    assert rank_correlation(x, y) == pytest.approx(brute_spearman(x, y))
    assert average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
