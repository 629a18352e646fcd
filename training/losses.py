"""Policy losses, KL estimators and token aggregation: pure functions on tensors.

Shapes: ``B`` candidates (sequences) in a micro-batch, ``T`` completion tokens (right-padded; the
padding is masked out by ``response_mask``), ``V`` vocabulary size.

Aggregation takes the *global* normalisers of the optimizer step (``num_tokens``: masked tokens in the
whole minibatch, ``num_seqs``: sequences in it), so the losses of the micro-batches of one minibatch
add up exactly to the loss of the minibatch computed in one piece: gradient accumulation never changes
the result. Every metric returned is normalised the same way and is therefore additive, too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from training.config import LOSS_AGGREGATIONS

# log-ratios beyond this are numerically meaningless and overflow exp() in float32
_MAX_LOG_RATIO = 20.0


# Float32 working memory allowed for a (rows, T, V) slice of logits in the two functions below: small
# vocabularies go in one call, a 150k vocabulary a few sequences at a time.
_LOGITS_CHUNK_BYTES = 256 * 2**20


def _row_chunks(logits: torch.Tensor) -> int:
    per_row = max(1, logits.shape[1] * logits.shape[2] * 4)
    return max(1, _LOGITS_CHUNK_BYTES // per_row)


def selective_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each chosen token, ``logit[t] - logsumexp(logits)``, in float32.

    Never materialises the full ``log_softmax`` (B, T, V) in float32: rows are processed in chunks of
    at most ``_LOGITS_CHUNK_BYTES``, which matters for 150k-token vocabularies.

    logits: (B, T, V), token_ids: (B, T) -> (B, T)
    """
    step = _row_chunks(logits)
    parts = []
    for start in range(0, logits.shape[0], step):
        chunk = logits[start:start + step].float()  # (b, T, V)
        ids = token_ids[start:start + step]  # (b, T)
        chosen = chunk.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # (b, T)
        parts.append(chosen - torch.logsumexp(chunk, dim=-1))  # (b, T)
    return torch.cat(parts)  # (B, T)


@torch.no_grad()
def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution, ``-sum_v p_v log p_v``; a metric, so no gradient.

    logits: (B, T, V) -> (B, T)
    """
    step = _row_chunks(logits)
    parts = []
    for start in range(0, logits.shape[0], step):
        logp = torch.log_softmax(logits[start:start + step].float(), dim=-1)  # (b, T, V)
        parts.append(-(logp.exp() * logp).sum(-1))  # (b, T)
    return torch.cat(parts)  # (B, T)


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 estimator of KL(pi || pi_ref): ``log pi - log pi_ref`` (unbiased, high variance, can be < 0).
    Source: Schulman 2020, "Approximating KL divergence". (B, T), (B, T) -> (B, T)"""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 estimator: ``0.5 (log pi - log pi_ref)^2`` (biased, low variance, >= 0). (B, T) -> (B, T)"""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 estimator: ``exp(d) - d - 1`` with ``d = log pi_ref - log pi`` (unbiased, low variance,
    always >= 0); the one GRPO puts in its loss. Source: Schulman 2020. (B, T) -> (B, T)"""
    d = (ref_logprobs - logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # (B, T)
    return torch.exp(d) - d - 1


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}


def get_kl_estimator(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The KL estimator registered as ``name``; an unknown name raises listing the valid ones."""
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown KL estimator {name!r}; valid estimators: {', '.join(sorted(KL_ESTIMATORS))}") from None


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float = 0.2,
    clip_range_high: float | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate per token, with optional clip-higher and dual clip.

    ``ratio = exp(log pi - log pi_old)``; ``loss = -min(ratio A, clip(ratio, 1 - eps_low, 1 + eps_high) A)``
    with ``eps_high = clip_range_high or clip_range`` (clip-higher, DAPO: Yu et al. 2025). With
    ``dual_clip = c > 1`` the loss of a negative-advantage token is additionally capped at ``-c A``
    (Ye et al. 2020, "Mastering Complex Control in MOBA Games"), so a huge ratio cannot blow it up.
    Source: Schulman et al. 2017, PPO, eq. 7.

    logprobs, old_logprobs: (B, T); advantages: (B,) per sequence or (B, T) per token
    -> per-token loss (B, T), clipped indicator (B, T) (1 where the clipped branch is active)
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # (B, 1), broadcast over tokens
    log_ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    high = clip_range if clip_range_high is None else clip_range_high
    unclipped = -advantages * ratio  # (B, T)
    clipped = -advantages * ratio.clamp(1.0 - clip_range, 1.0 + high)  # (B, T)
    loss = torch.maximum(unclipped, clipped)  # (B, T), pessimistic bound
    clipped_active = (clipped > unclipped).float()  # (B, T); 0 when ratio == 1
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (a cap of c * |A| on negative advantages); got {dual_clip}")
        capped = torch.minimum(loss, -advantages * dual_clip)  # (B, T)
        loss = torch.where(advantages < 0, capped, loss)  # (B, T)
    return loss, clipped_active


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token_mean",
    *,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce per-token values to a scalar.

    - ``token_mean``: ``sum(values * mask) / num_tokens`` — every token of the batch weighs the same
      (DAPO), so long completions are not diluted.
    - ``seq_mean``: ``sum_i (sum_t values_it mask_it / n_i) / num_seqs`` — per-sequence mean, then mean
      over sequences (original GRPO).

    ``num_tokens`` / ``num_seqs`` default to this batch's own counts; pass the minibatch totals when
    this is one micro-batch of several. values, mask: (B, T) -> ()
    """
    mask = mask.to(values.dtype)
    if mode == "token_mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return (values * mask).sum() / _positive(denom)
    if mode == "seq_mean":
        per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)
        denom = values.shape[0] if num_seqs is None else num_seqs
        return per_seq.sum() / _positive(denom)
    raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(LOSS_AGGREGATIONS)}")


def ppo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    ref_logprobs: torch.Tensor | None = None,
    clip_range: float = 0.2,
    clip_range_high: float | None = None,
    dual_clip: float | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    aggregation: str = "token_mean",
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The full objective of one (micro-)batch: clipped surrogate + ``kl_coef`` * KL to the reference.

    ``loss = agg(ppo_clip_loss) + kl_coef * agg(KL_est(log pi, log pi_ref))``; with ``ref_logprobs``
    None the KL term is left out (and not reported). Metrics (detached, each already divided by the
    global normalisers so micro-batches add up): ``loss/policy``, ``loss/kl`` (the penalty as added,
    i.e. times ``kl_coef``), ``kl`` (token mean of the estimator), ``clip_frac`` and ``approx_kl``
    (k3 of the old policy to the new, a step-size diagnostic), all token means except ``loss/*`` which
    follow ``aggregation``. ``token_weights`` (detached, e.g. ``tis_weights``) scale each token's
    policy loss.

    logprobs, old_logprobs, ref_logprobs, response_mask, token_weights: (B, T); advantages: (B,) -> loss ()
    """
    if num_tokens is None:
        num_tokens = response_mask.sum()
    per_token, clipped = ppo_clip_loss(logprobs, old_logprobs, advantages, clip_range, clip_range_high, dual_clip)
    if token_weights is not None:
        per_token = per_token * token_weights  # (B, T)
    policy = aggregate(per_token, response_mask, aggregation, num_tokens=num_tokens, num_seqs=num_seqs)
    loss = policy
    with torch.no_grad():
        metrics = {
            "loss/policy": policy.detach(),
            "clip_frac": aggregate(clipped, response_mask, num_tokens=num_tokens),
            "approx_kl": aggregate(kl_k3(logprobs, old_logprobs), response_mask, num_tokens=num_tokens),
        }
    if ref_logprobs is not None:
        kl = get_kl_estimator(kl_estimator)(logprobs, ref_logprobs)  # (B, T)
        kl_term = aggregate(kl, response_mask, aggregation, num_tokens=num_tokens, num_seqs=num_seqs)
        if kl_coef:
            loss = loss + kl_coef * kl_term
        metrics["loss/kl"] = (kl_coef * kl_term).detach()
        metrics["kl"] = aggregate(kl.detach(), response_mask, num_tokens=num_tokens)
    return loss, metrics


def tis_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly brings
    you off-policy RL training"): the tokens were drawn by the sampler, whose log-probs differ from
    the trainer's (other kernels, merged LoRA, half precision), so each token's loss is weighted by
    ``min(pi_old / pi_sampler, cap)``. Detached: a correction factor, not a gradient path.

    old_logprobs, sampler_logprobs: (B, T) -> weights (B, T)
    """
    return (old_logprobs.detach() - sampler_logprobs).exp().clamp(max=cap)


def logprob_mismatch(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor
                     ) -> tuple[float, float, float]:
    """Sampler/trainer disagreement on the sampled tokens, under the same weights.

    ``r = log pi_old - log pi_sampler``; per token ``k3 = exp(r) - 1 - r`` (Schulman's unbiased,
    non-negative estimator of KL(sampler || trainer) from the sampler's own samples).

    old_logprobs, sampler_logprobs, mask: (B, T) -> (max |r|, sum of k3, number of tokens) over mask
    """
    m = mask.bool()
    r = (old_logprobs.detach().float() - sampler_logprobs.float())[m]  # (N,)
    if r.numel() == 0:
        return 0.0, 0.0, 0.0
    k3 = torch.expm1(r) - r  # (N,)
    return float(r.abs().max()), float(k3.sum()), float(r.numel())


def _positive(denom: float | torch.Tensor) -> float | torch.Tensor:
    if isinstance(denom, torch.Tensor):
        return denom.clamp(min=1.0)
    return max(float(denom), 1.0)
