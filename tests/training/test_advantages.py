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
