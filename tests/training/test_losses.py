import math

import pytest
import torch

from training.losses import (aggregate, entropy_from_logits, get_kl_estimator, kl_k1, kl_k3,
                             ppo_clip_loss, ppo_loss, selective_logprobs)


def test_ratio_one_gives_zero_clip_fraction():
    logp = torch.log(torch.tensor([[0.2, 0.5, 0.9], [0.3, 0.3, 0.1]]))
    mask = torch.ones(2, 3)
    loss, metrics = ppo_loss(logp, logp.clone(), torch.tensor([1.0, -1.0]), mask, clip_range=0.2)
    assert metrics["clip_frac"].item() == 0.0
    assert metrics["approx_kl"].item() == pytest.approx(0.0, abs=1e-7)
    # -ratio * A averaged over tokens: (-1*3 + 1*3) / 6
    assert loss.item() == pytest.approx(0.0)


def test_kl_of_identical_logprobs_is_zero():
    logp = torch.randn(3, 5)
    for name in ("k1", "k2", "k3"):
        assert torch.equal(get_kl_estimator(name)(logp, logp), torch.zeros(3, 5))


def test_kl_estimators_match_hand_computed_values():
    logp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    assert kl_k1(logp, ref).item() == pytest.approx(math.log(2))
    # d = log(0.25/0.5) = -log 2: exp(d) - d - 1 = 0.5 + log 2 - 1
    assert kl_k3(logp, ref).item() == pytest.approx(0.5 + math.log(2) - 1)


def test_clipped_surrogate_matches_hand_computed_values():
    old = torch.zeros(1, 4)
    ratios = torch.tensor([[0.5, 0.9, 1.1, 1.5]])
    new = torch.log(ratios)
    loss, clipped = ppo_clip_loss(new, old, torch.tensor([1.0]), clip_range=0.2)
    # A > 0: -min(r, clip(r, .8, 1.2)) -> [-.5, -.9, -1.1, -1.2]
    assert torch.allclose(loss, torch.tensor([[-0.5, -0.9, -1.1, -1.2]]))
    assert clipped.tolist() == [[0.0, 0.0, 0.0, 1.0]]
    loss, clipped = ppo_clip_loss(new, old, torch.tensor([-1.0]), clip_range=0.2)
    # A < 0: max(r, clip(r)) -> [.8, .9, 1.1, 1.5]
    assert torch.allclose(loss, torch.tensor([[0.8, 0.9, 1.1, 1.5]]))
    assert clipped.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_clip_higher_widens_only_the_upper_bound():
    old, new = torch.zeros(1, 2), torch.log(torch.tensor([[0.5, 1.5]]))
    loss, _ = ppo_clip_loss(new, old, torch.tensor([1.0]), clip_range=0.2, clip_range_high=0.28)
    assert torch.allclose(loss, torch.tensor([[-0.5, -1.28]]))
    loss, _ = ppo_clip_loss(new, old, torch.tensor([-1.0]), clip_range=0.2, clip_range_high=0.28)
    assert torch.allclose(loss, torch.tensor([[0.8, 1.5]]))


def test_dual_clip_caps_the_loss_of_negative_advantages():
    old, new = torch.zeros(1, 2), torch.log(torch.tensor([[5.0, 1.0]]))
    loss, _ = ppo_clip_loss(new, old, torch.tensor([-2.0]), clip_range=0.2, dual_clip=3.0)
    assert torch.allclose(loss, torch.tensor([[6.0, 2.0]]))  # 5 * 2 capped at 3 * 2
    loss, _ = ppo_clip_loss(new, old, torch.tensor([2.0]), clip_range=0.2, dual_clip=3.0)
    assert torch.allclose(loss, torch.tensor([[-2.4, -2.0]]))  # positive advantages untouched
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        ppo_clip_loss(new, old, torch.tensor([1.0]), dual_clip=0.5)


def test_token_mean_and_seq_mean_weigh_tokens_differently():
    values = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(values, mask, "token_mean").item() == pytest.approx(7 / 4)
    assert aggregate(values, mask, "seq_mean").item() == pytest.approx((1 + 4) / 2)
    with pytest.raises(ValueError, match="valid: token_mean, seq_mean"):
        aggregate(values, mask, "sum")


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_micro_batches_add_up_to_the_whole_batch(aggregation):
    torch.manual_seed(0)
    logp, old, ref = torch.randn(6, 5) - 2, torch.randn(6, 5) - 2, torch.randn(6, 5) - 2
    adv = torch.randn(6)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1
    kw = dict(ref_logprobs=ref, kl_coef=0.1, aggregation=aggregation, clip_range_high=0.3)
    whole, whole_metrics = ppo_loss(logp, old, adv, mask, **kw)
    parts = [ppo_loss(logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], ref_logprobs=ref[i:i + 2],
                      kl_coef=0.1, aggregation=aggregation, clip_range_high=0.3,
                      num_tokens=mask.sum(), num_seqs=6) for i in (0, 2, 4)]
    assert sum(p[0] for p in parts).item() == pytest.approx(whole.item(), rel=1e-5)
    for key, value in whole_metrics.items():
        assert sum(p[1][key] for p in parts).item() == pytest.approx(value.item(), rel=1e-5, abs=1e-7), key


def test_first_epoch_gradient_is_the_policy_gradient():
    # old = logp.detach(): the ratio is exactly 1 and d loss / d logp = -A / num_tokens
    logp = torch.log(torch.tensor([[0.2, 0.5], [0.4, 0.6]])).requires_grad_()
    loss, metrics = ppo_loss(logp, logp.detach(), torch.tensor([2.0, -1.0]), torch.ones(2, 2))
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -0.5], [0.25, 0.25]]))
    assert metrics["clip_frac"].item() == 0.0


def test_kl_penalty_is_left_out_without_reference():
    logp = torch.randn(2, 3)
    _, metrics = ppo_loss(logp, logp, torch.ones(2), torch.ones(2, 3))
    assert "kl" not in metrics and "loss/kl" not in metrics
    _, metrics = ppo_loss(logp, logp, torch.ones(2), torch.ones(2, 3), ref_logprobs=logp - 0.1, kl_coef=0.5,
                          kl_estimator="k1")
    assert metrics["kl"].item() == pytest.approx(0.1, rel=1e-4)
    assert metrics["loss/kl"].item() == pytest.approx(0.05, rel=1e-4)


@pytest.mark.parametrize("chunk_bytes", [1, 1 << 30], ids=["row-by-row", "one-piece"])
def test_selective_logprobs_equal_the_full_log_softmax(monkeypatch, chunk_bytes):
    monkeypatch.setattr("training.losses._LOGITS_CHUNK_BYTES", chunk_bytes)
    logits = torch.randn(3, 4, 11)
    ids = torch.randint(0, 11, (3, 4))
    expected = torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(selective_logprobs(logits, ids), expected, atol=1e-6)
    probs = torch.softmax(logits, -1)
    assert torch.allclose(entropy_from_logits(logits), -(probs * probs.log()).sum(-1), atol=1e-5)


def test_entropy_of_a_uniform_distribution_is_log_vocab():
    assert torch.allclose(entropy_from_logits(torch.zeros(1, 2, 8)), torch.full((1, 2), math.log(8)))


def test_tis_weights_are_the_capped_ratio_of_trainer_to_sampler_probabilities():
    from training.losses import tis_weights

    old = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4, 0.3]]))
    assert torch.allclose(tis_weights(old, sampler, cap=2.0), torch.tensor([[2.0, 0.5, 2.0]]))


def test_logprob_mismatch_is_zero_for_equal_logprobs_and_k3_otherwise():
    from training.losses import logprob_mismatch

    lp = torch.log(torch.tensor([[0.5, 0.2], [0.3, 0.1]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    assert logprob_mismatch(lp, lp, mask) == (0.0, 0.0, 3.0)
    r = torch.tensor([0.1, -0.2, 0.3])
    shifted = lp.clone()
    shifted[0, 0] -= 0.1
    shifted[0, 1] += 0.2
    shifted[1, 0] -= 0.3
    shifted[1, 1] += 5.0  # masked out
    max_diff, k3_sum, n = logprob_mismatch(lp, shifted, mask)
    assert max_diff == pytest.approx(0.3) and n == 3.0
    assert k3_sum == pytest.approx(float((r.exp() - 1 - r).sum()), rel=1e-5)


def test_token_weights_scale_the_policy_loss():
    from training.losses import ppo_loss

    lp = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    adv = torch.tensor([1.0])
    plain, _ = ppo_loss(lp, lp, adv, mask)
    half, _ = ppo_loss(lp, lp, adv, mask, token_weights=torch.full((1, 2), 0.5))
    assert float(half) == pytest.approx(0.5 * float(plain))
