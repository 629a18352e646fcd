import pytest
import torch

from training.advantages import ADVANTAGES, compute_advantages, get_advantage, zero_variance_groups


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
