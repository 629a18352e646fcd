import pytest
import torch

from training.advantages import (ADVANTAGES, compute_advantages, get_advantage,
                                 get_normalization, group_rewards, per_component, weighted_sum,
                                 zero_variance_groups)


REWARDS = torch.tensor([[1.0, 0.0, 0.5, 0.5], [0.2, 0.9, 0.1, 0.3], [0.7, 0.7, 0.7, 0.7]])


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_group_advantages_sum_to_zero(name):
    adv = compute_advantages(name, REWARDS)
    assert adv.shape == REWARDS.shape
    assert torch.allclose(adv.sum(dim=1), torch.zeros(3), atol=1e-5)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_zero_variance_groups_stay_finite_and_zero(name):
    adv = compute_advantages(name, torch.full((2, 4), 0.3))
    assert torch.isfinite(adv).all()
    assert torch.equal(adv, torch.zeros(2, 4))


def test_grpo_matches_hand_computed_values():
    # group [1, 0, 0.5, 0.5]: mean 0.5, unbiased std sqrt(0.5/3)
    std = (0.5 / 3) ** 0.5
    adv = compute_advantages("grpo", REWARDS[:1], eps=0.0)
    assert torch.allclose(adv, torch.tensor([[0.5 / std, -0.5 / std, 0.0, 0.0]]))


def test_dr_grpo_does_not_divide_by_the_std():
    adv = compute_advantages("dr_grpo", REWARDS[:1])
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, 0.0, 0.0]]))


def test_rloo_uses_the_leave_one_out_mean():
    adv = compute_advantages("rloo", torch.tensor([[1.0, 0.0, 0.5]]))
    # 1 - mean(0, .5) = .75 ; 0 - mean(1, .5) = -.75 ; .5 - mean(1, 0) = 0
    assert torch.allclose(adv, torch.tensor([[0.75, -0.75, 0.0]]))


def test_zero_variance_groups_are_found_per_problem():
    assert zero_variance_groups(REWARDS).tolist() == [False, False, True]


def test_it_rejects_group_size_one():
    with pytest.raises(ValueError, match="at least 2 candidates"):
        compute_advantages("grpo", torch.ones(3, 1))


def test_it_rejects_ungrouped_rewards():
    with pytest.raises(ValueError, match=r"\(problems, candidates\)"):
        compute_advantages("grpo", torch.ones(6))


def test_an_unknown_estimator_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid estimators: dr_grpo, grpo, rloo"):
        get_advantage("ppo")


@pytest.mark.parametrize("name", ["grpo", "rloo", "dr_grpo"])
def test_a_group_of_equal_rewards_gets_exactly_zero_advantages(name):
    from training.advantages import compute_advantages

    # 0.1 and 0.7 are not representable: the float32 mean of 16 copies misses them by an ulp, which
    # GRPO's division by std + eps used to blow up to advantages of a few hundredths
    rewards = torch.tensor([[0.1] * 16, [0.7] * 16, [0.0] * 8 + [1.0] * 8], dtype=torch.float32)
    advantages = compute_advantages(name, rewards)
    assert torch.equal(advantages[:2], torch.zeros(2, 16))
    assert advantages[2].abs().min() > 0.4  # a group with signal is untouched


def test_with_discounted_credit_a_group_whose_trajectories_all_end_passing_still_has_signal():
    from training.advantages import turn_advantages, zero_variance_turn_groups

    gamma = 0.4
    at_once = [[1.0], [1.0]]               # both pass at turn 1
    mixed = [[1.0], [0.2, 1.0]]            # one passes at once, one after a repair: same final reward
    flat = [[0.0, 0.0], [0.0, 0.0]]        # both fail twice, scoring nothing
    failed_twice = [[0.2, 0.2], [0.2, 0.2]]  # returns 0.28 then 0.2: turn 1 is still worth more than turn 2
    assert zero_variance_turn_groups([at_once, mixed, flat, failed_twice], gamma).tolist() == [True, False, True,
                                                                                                 False]
    # the final rewards alone would call the mixed group flat...
    assert zero_variance_groups(torch.tensor([[1.0, 1.0]])).tolist() == [True]
    # ...while its turns get advantages: returns 1.0 | 0.2 + 0.4 * 1.0 = 0.6, 1.0 -> pool [1.0, 0.6, 1.0]
    adv = turn_advantages("grpo", [mixed], gamma)[0]
    assert adv[1][0] < 0 < adv[0][0] and adv[1][1] == pytest.approx(adv[0][0])


# reward.normalize (GDPO-style per-component normalization): components (P, K, D), weights (D,)

COMPONENTS = torch.tensor([
    [[1.0, 1.0, 0.2], [0.0, 1.0, 0.9], [0.5, 1.0, 0.4], [0.5, 0.0, 0.4]],
    [[0.3, 1.0, 1.0], [0.3, 1.0, 0.1], [0.3, 1.0, 0.7], [0.3, 1.0, 0.5]],
])  # dimension 0 has zero variance in group 1, dimension 1 in group 1 too
WEIGHTS = torch.tensor([0.6, 0.15, 0.05])


def z_scores(components: torch.Tensor) -> torch.Tensor:
    """What per_component weights: each dimension's (r - mean) / (std + eps) over the group. (P, K, D)"""
    centered = components - components.mean(dim=1, keepdim=True)
    return centered / (components.std(dim=1, keepdim=True) + 1e-6)


def test_per_component_dimensions_sum_to_zero_over_each_group_before_weighting():
    z = z_scores(COMPONENTS)
    assert torch.allclose(z.sum(dim=1), torch.zeros(2, 3), atol=1e-5)
    # and so does their weighted combination, the value the estimator sees
    assert torch.allclose(per_component(COMPONENTS, WEIGHTS).sum(dim=1), torch.zeros(2), atol=1e-5)


def test_a_zero_variance_dimension_contributes_exactly_zero():
    with_dim = per_component(COMPONENTS, WEIGHTS)
    # group 1: dimensions 0 and 1 are constant, so only dimension 2 moves the result
    only_last = per_component(COMPONENTS[1:, :, 2:], WEIGHTS[2:]) * WEIGHTS[2] / WEIGHTS.sum()
    assert torch.equal(with_dim[1], only_last[0])
    assert torch.equal(per_component(torch.full((1, 4, 3), 0.7), WEIGHTS), torch.zeros(1, 4))


def test_scaling_one_dimension_by_a_constant_does_not_change_the_result():
    scaled = COMPONENTS.clone()
    scaled[..., 2] *= 0.01  # a dimension of tiny spread counts as much as before
    assert torch.allclose(per_component(scaled, WEIGHTS, eps=0.0), per_component(COMPONENTS, WEIGHTS, eps=0.0),
                          atol=1e-5)


def test_sum_mode_is_each_candidates_weighted_mean_as_combine_scores_it():
    from training.rewards import combine

    out = weighted_sum(COMPONENTS, WEIGHTS)
    names = ("pass_rate", "syntax", "conciseness")
    for p in range(2):
        for k in range(4):
            expected = combine(dict(zip(names, COMPONENTS[p, k].tolist())), dict(zip(names, WEIGHTS.tolist())))
            assert out[p, k].item() == pytest.approx(expected, abs=1e-6)
    plain = weighted_sum(COMPONENTS, WEIGHTS, mean=False)
    assert torch.allclose(plain, (COMPONENTS * WEIGHTS).sum(-1))


def test_per_component_matches_a_hand_computed_example():
    # one group of 3, dims (a, b), weights (1, 3): a = [1, 0, 0] -> mean 1/3, std sqrt(1/3);
    # b = [0, 0.1, 0.2] -> mean 0.1, std 0.1
    comps = torch.tensor([[[1.0, 0.0], [0.0, 0.1], [0.0, 0.2]]])
    za = [(2 / 3) / 3 ** -0.5, (-1 / 3) / 3 ** -0.5, (-1 / 3) / 3 ** -0.5]
    zb = [-1.0, 0.0, 1.0]
    expected = torch.tensor([[(1 * a + 3 * b) / 4 for a, b in zip(za, zb)]])
    assert torch.allclose(per_component(comps, torch.tensor([1.0, 3.0]), eps=0.0), expected, atol=1e-5)
    # the plain sum would rank candidate 0 first (0.25 vs 0.075 vs 0.15); per component it is candidate 2
    assert per_component(comps, torch.tensor([1.0, 3.0])).argmax().item() == 2


def test_group_rewards_in_sum_mode_are_the_candidates_totals():
    from training.rewards import combine, total_reward

    weights = {"pass_rate": 0.6, "syntax": 0.3, "format": 0.1, "efficiency": 0.0}
    rewards = [{"pass_rate": p, "syntax": s, "format": f} for p, s, f in
               ((1.0, 1.0, 1.0), (0.5, 1.0, 0.0), (0.0, 0.0, 1.0), (0.25, 1.0, 1.0))]
    penalties, flagged = [0.0, -0.3, 0.0, 0.0], [False, False, False, True]
    out = group_rewards("sum", rewards, weights, 2, penalties=penalties, penalized=flagged)
    expected = [total_reward(combine(r, weights), p, ["x"] if f else [])
                for r, p, f in zip(rewards, penalties, flagged)]
    assert out.shape == (2, 2)
    assert torch.allclose(out.flatten(), torch.tensor(expected), atol=1e-6)


def test_group_rewards_per_component_count_a_flagged_candidate_with_every_dimension_zero():
    weights = {"pass_rate": 1.0, "syntax": 1.0}
    rewards = [{"pass_rate": 1.0, "syntax": 1.0}, {"pass_rate": 0.0, "syntax": 1.0}, {"pass_rate": 1.0, "syntax": 1.0}]
    out = group_rewards("per_component", rewards, weights, 3, penalized=[False, False, True])
    zeroed = per_component(torch.tensor([[[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]]), torch.tensor([1.0, 1.0]))
    assert torch.allclose(out, zeroed)
    assert out[0, 2] < out[0, 1] < out[0, 0]


def test_an_unknown_normalization_lists_the_valid_ones():
    with pytest.raises(ValueError, match="per_component, sum"):
        get_normalization("zscore")



def test_a_rollouts_normalized_rewards_are_written_on_its_candidates_turns_or_not():
    from training.candidates import CandidateRecord, Rollout, normalized_rewards
    from training.config import RewardConfig, RewardWeights

    def record(group, pass_rate, syntax, penalized=(), turns=None):
        return CandidateRecord(problem_id=f"p{group}", group=group, text="", code="", result={},
                               rewards={"pass_rate": pass_rate, "syntax": syntax}, reward=0.0, passed=False,
                               penalized_flags=penalized, turns=turns)

    cands = [record(0, 1.0, 1.0), record(0, 0.0, 1.0),
             record(1, 0.5, 1.0, penalized=("broad_except",), turns=[{"reward": 0.0}, {"reward": 0.0}]),
             record(1, 0.5, 0.0)]
    rollout = Rollout(problems=[None, None], candidates=cands, batch=None, rewards=torch.zeros(2, 2),
                      generated_tokens=0, time_generate_s=0.0, time_sandbox_s=0.0)
    reward = RewardConfig(weights=RewardWeights(pass_rate=1.0, syntax=1.0, efficiency=0.0, conciseness=0.0,
                                                format=0.0), normalize="per_component")
    values = normalized_rewards(rollout, reward)  # (P, K)
    assert [c.reward_normalized for c in cands] == pytest.approx(values.flatten().tolist())
    assert values[0, 0] > 0 > values[0, 1]  # group 0: only pass_rate varies
    assert values[1, 0] < values[1, 1]  # the flagged trajectory counts with every dimension 0
    assert cands[2].event_dict()["reward_normalized"] == cands[2].reward_normalized
