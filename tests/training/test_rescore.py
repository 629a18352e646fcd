"""What-if re-scoring (training/rescore.py) against a brute-force recomputation in plain Python.

The brute force spells out, from the formulas in docs/design.md ("Reward") and the functions' docstrings, what training
does to a candidate's stored rewards: weighted mean (or sum), overlong penalty, 0 for a penalised flag,
the estimator per group, the clip; and Spearman's rho from ranks counted pair by pair.
"""

from __future__ import annotations

import dataclasses
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
              brute_total(c, before.weights, before.weighted_mean, before.penalize_flags) for c in cs]
        ra = [brute_total(c, weights, before.weighted_mean, before.penalize_flags) for c in cs]
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
    RewardSettings(weights=dict(zip(DIMS, (1.0, 0.5, 0.0, 0.5, 0.2))), advantage="rloo", clip=None,
                   weighted_mean=False),
    RewardSettings(weights=dict(zip(DIMS, (0.6, 0.15, 0.1, 0.05, 0.1))), advantage="dr_grpo", clip=0.1),
]
NEW_WEIGHTS = [dict(zip(DIMS, w)) for w in ((1, 0, 0, 0, 0), (0.2, 0.2, 0.2, 0.2, 0.2), (0.3, 0.0, 0.6, 1.0, 0.0))]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.advantage}-clip{s.clip}-mean{s.weighted_mean}")
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
    cfg = config_from_dict({"reward": {"weighted_mean": False, "normalize": "per_component", "clip": None,
                                       "penalize_flags": ["broad_except"]}, "ppo": {"advantage": "rloo"}})
    s = RewardSettings.from_config(cfg)
    assert (s.weighted_mean, s.normalize, s.clip, s.advantage, s.penalize_flags) == (
        False, "per_component", None, "rloo", ("broad_except",))
    assert s.weights == cfg.reward.weights.as_dict()


@pytest.mark.parametrize("x,y", [([1, 2, 3, 4], [1, 2, 3, 4]), ([1, 2, 3, 4], [4, 3, 2, 1]),
                                 ([1, 1, 2, 3], [3, 1, 1, 2]), ([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]), ([2, 2], [7, 7])])
def test_rank_correlation_is_spearmans_rho_with_average_ranks(x, y):
    assert rank_correlation(x, y) == pytest.approx(brute_spearman(x, y))
    assert average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


# ------------------------------------------------------------------------------------- multi-turn repair

def _repair_group(**settings):
    """One group of two multi-turn candidates. A fails (pass_rate 0, syntax 1), is told why and passes;
    B passes half the tests at its first turn (a trajectory of one turn). Stored under weights 0.5/0.5."""
    from training.rescore import StoredTurn

    a = (StoredTurn(rewards={"pass_rate": 0.0, "syntax": 1.0}, reward=0.5),
         StoredTurn(rewards={"pass_rate": 1.0, "syntax": 1.0}, reward=1.0))
    b = (StoredTurn(rewards={"pass_rate": 0.5, "syntax": 1.0}, reward=0.75),)
    cands = [StoredCandidate(step=1, problem_id="p", index=i, rewards=dict(turns[-1].rewards),
                             reward=turns[-1].reward, turns=turns) for i, turns in enumerate((a, b))]
    before = RewardSettings(weights={"pass_rate": 0.5, "syntax": 0.5}, advantage="dr_grpo", clip=None, **settings)
    return cands, before


def test_discounted_turn_credit_is_rescored_per_turn_with_hand_computed_numbers():
    cands, before = _repair_group(turns="discounted", turn_discount=0.5)
    out = rescore(cands, before, {"pass_rate": 1.0, "syntax": 0.0})
    # Before: A's turns r = (0.5, 1.0), returns G = (0.5 + 0.5 * 1.0, 1.0) = (1.0, 1.0); B's G = 0.75.
    # Pool (1.0, 1.0, 0.75), mean 11/12: Dr. GRPO advantages (1/12, 1/12, -1/6).
    # After (pass_rate alone): A's r = (0, 1), G = (0.5, 1.0); B's G = 0.5. Pool mean 2/3: (-1/6, 1/3, -1/6).
    a, b = out["problems"][0]["candidates"]
    assert [(t["reward_before"], t["reward_after"]) for t in a["turns"]] == [(0.5, 0.0), (1.0, 1.0)]
    assert [(t["return_before"], t["return_after"]) for t in a["turns"]] == [(1.0, 0.5), (1.0, 1.0)]
    assert [t["advantage_before"] for t in a["turns"]] == pytest.approx([1 / 12, 1 / 12], abs=1e-6)
    assert [t["advantage_after"] for t in a["turns"]] == pytest.approx([-1 / 6, 1 / 3], abs=1e-6)
    assert [t["sign_flip"] for t in a["turns"]] == [True, False]  # turn 1 + -> -, turn 2 stays +
    assert b["turns"][0]["advantage_before"] == pytest.approx(-1 / 6, abs=1e-6)
    assert b["turns"][0]["advantage_after"] == pytest.approx(-1 / 6, abs=1e-6) and not b["sign_flip"]
    # A candidate's own numbers are its first turn's: the trajectory's return and advantage.
    assert (a["reward_before"], a["reward_after"]) == (1.0, 0.5) and a["sign_flip"]
    assert a["advantage_after"] == pytest.approx(-1 / 6, abs=1e-6)
    # One of the three turn advantages flips. Ranks of the pools: (2.5, 2.5, 1) vs (1.5, 3, 1.5): rho = 0.5.
    assert out["summary"]["sign_flips"] == pytest.approx(1 / 3) and out["summary"]["candidates"] == 2
    assert out["steps"][0]["rank_corr"] == pytest.approx(0.5)


def test_final_turn_credit_rescores_the_trajectorys_last_turn_and_any_turns_penalised_flag():
    cands, before = _repair_group(turns="final", penalize_flags=("spoofed_output",))
    out = rescore(cands, before, {"pass_rate": 1.0, "syntax": 0.0})
    a, b = out["problems"][0]["candidates"]
    # Totals are the last turns': before (1.0, 0.75), after (1.0, 0.5); mean-centred (1/8, -1/8), (1/4, -1/4).
    assert (a["reward_before"], a["reward_after"], b["reward_before"], b["reward_after"]) == (1.0, 1.0, 0.75, 0.5)
    assert a["advantage_before"] == pytest.approx(0.125) and a["advantage_after"] == pytest.approx(0.25)
    # Every turn's tokens get the trajectory's advantage; each turn's own reward is shown beside it.
    assert [(t["reward_before"], t["reward_after"], t["return_after"], t["advantage_after"]) for t in a["turns"]] \
        == [(0.5, 0.0, 1.0, pytest.approx(0.25)), (1.0, 1.0, 1.0, pytest.approx(0.25))]
    assert out["summary"]["sign_flips"] == 0.0

    # A flag the run penalises on turn 1 alone zeroes the whole trajectory, as training does.
    hacked = dataclasses.replace(cands[0], reward=0.0, turns=(
        dataclasses.replace(cands[0].turns[0], flags=("spoofed_output",), reward=0.0), cands[0].turns[1]))
    assert total_under(hacked, before) == 0.0
    out = rescore([hacked, cands[1]], before, {"pass_rate": 1.0, "syntax": 0.0})
    a = out["problems"][0]["candidates"][0]
    assert (a["reward_before"], a["reward_after"]) == (0.0, 0.0)
    assert [t["reward_after"] for t in a["turns"]] == [0.0, 1.0]  # the flagged turn's own total is 0


def test_a_turns_overlong_penalty_is_kept_and_inferred_where_the_run_did_not_store_it():
    from training.rescore import StoredTurn, turn_totals_under

    before = RewardSettings(weights={"pass_rate": 0.5, "syntax": 0.5}, turns="discounted")
    stored = StoredTurn(rewards={"pass_rate": 1.0, "syntax": 1.0}, reward=0.75, overlong_penalty=-0.25)
    old = StoredTurn(rewards={"pass_rate": 0.0, "syntax": 1.0}, reward=0.25)  # 0.5 combined, penalty not stored
    c = StoredCandidate(step=1, problem_id="p", index=0, rewards=stored.rewards, turns=(old, stored))
    assert turn_totals_under(c, before, before) == [0.25, 0.75]
    assert turn_totals_under(c, dataclasses.replace(before, weights={"pass_rate": 1.0, "syntax": 0.0}),
                             before) == [-0.25, 0.75]


def test_a_one_turn_run_is_rescored_as_before_whatever_reward_turns_says():
    cfg = config_from_dict({"reward": {"turns": "discounted"}})
    assert RewardSettings.from_config(cfg).turns == "final"  # sampling.turns 1: one advantage per candidate
    cfg = config_from_dict({"reward": {"turns": "discounted", "turn_discount": 0.7},
                            "sampling": {"turns": 2, "prompt_style": "chat"}})
    s = RewardSettings.from_config(cfg)
    assert (s.turns, s.turn_discount) == ("discounted", 0.7)


def test_each_candidate_is_ranked_in_its_group_best_first_ties_sharing_their_mean_rank():
    before = RewardSettings(weights={"pass_rate": 1.0, "syntax": 0.0}, advantage="grpo", clip=5.0)
    group = [StoredCandidate(step=1, problem_id="p", index=i, rewards={"pass_rate": p, "syntax": s})
             for i, (p, s) in enumerate([(1.0, 0.0), (0.5, 1.0), (0.5, 0.0), (0.0, 1.0)])]
    out = rescore(group, before, {"pass_rate": 0.0, "syntax": 1.0})
    ranks = [(c["rank_before"], c["rank_after"]) for c in out["problems"][0]["candidates"]]
    assert ranks == [(1.0, 3.5), (2.5, 1.5), (2.5, 3.5), (4.0, 1.5)]


def brute_per_component(cs: list[StoredCandidate], weights: dict, mean: bool, penalize: tuple) -> list[float]:
    """reward.normalize: per_component spelled out: each dimension's z-score within the group (0 when the
    dimension is constant), a flagged candidate counted with every dimension 0, then weighted, plus penalties."""
    flagged = [any(f in penalize for f in c.flags) for c in cs]
    out = [0.0] * len(cs)
    for d, w in weights.items():
        if not w:
            continue
        v = [0.0 if f else c.rewards[d] for c, f in zip(cs, flagged)]
        if max(v) == min(v):
            continue
        m, s = statistics.fmean(v), statistics.stdev(v)
        out = [o + w * (x - m) / (s + EPS) for o, x in zip(out, v)]
    total = sum(weights.values()) if mean else 1.0
    return [o / total + (0.0 if f else c.overlong_penalty) for o, c, f in zip(out, cs, flagged)]


@pytest.mark.parametrize("advantage", ["grpo", "rloo"])
def test_per_component_runs_are_rescored_from_the_normalized_dimensions(advantage):
    before = RewardSettings(weights=dict(zip(DIMS, (0.6, 0.15, 0.1, 0.05, 0.1))), advantage=advantage, clip=None,
                            penalize_flags=("exit_before_tests",), normalize="per_component")
    weights = dict(zip(DIMS, (0.3, 0.0, 0.6, 1.0, 0.0)))
    candidates = make_candidates(seed=f"gdpo-{advantage}")
    out = rescore(candidates, before, weights, top=100)
    rows = {(p["problem_id"], c["step"], c["index"]): c for p in out["problems"] for c in p["candidates"]}
    groups: dict = {}
    for c in candidates:
        groups.setdefault((c.step, c.problem_id), []).append(c)
    for (step, pid), cs in groups.items():
        cs = sorted(cs, key=lambda c: c.index)
        for side, w in (("before", before.weights), ("after", weights)):
            adv = brute_advantages(brute_per_component(cs, w, True, before.penalize_flags), advantage, None)
            totals = [brute_total(c, w, True, before.penalize_flags) for c in cs]  # what users read
            for c, a, t in zip(cs, adv, totals):
                row = rows[(pid, step, c.index)]
                assert row[f"advantage_{side}"] == pytest.approx(a, abs=1e-4)
                assert row[f"reward_{side}"] == pytest.approx(t, abs=1e-6)
    summed = rescore(candidates, dataclasses.replace(before, normalize="sum"), weights, top=100)
    assert summed["summary"] != out["summary"]  # the setting changes the advantages, hence the flips


def test_a_discounted_multi_turn_run_cannot_be_rescored_per_component():
    before = RewardSettings(weights={"pass_rate": 1.0}, normalize="per_component", turns="discounted")
    with pytest.raises(ConfigError, match="reward.normalize"):
        rescore(make_candidates(1), before, {"pass_rate": 1.0})
