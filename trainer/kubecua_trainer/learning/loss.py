"""The per-token GRPO loss (PPO's per-token ratio, or GSPO's per-sequence one), the entropy bonus,
and the aggregation over a batch.

Three policies appear per token: the current one (logp, with grad), the proximal one the batch was
collected against as recomputed by the trainer (old_logp), and the engine's behaviour policy
(behaviour_logp). The ratio is current/proximal with separate low and high clips (DAPO
clip-higher); a truncated importance weight min(proximal/behaviour, cap) corrects for engine and
trainer numerics (or weights, with rollout.maxStaleness) disagreeing. With one optimizer step per
batch the proximal policy is the current one detached, so the ratio is 1 at the step and its
gradient is grad logp; the clip then never acts, and what GSPO changes in practice is the
importance weight: one per sequence instead of one per token (see sequence_loss). With
algorithm.miniBatches > 1 the later mini-batches' proximal log-probs come from before the step's
first update (learner.py), and the clip acts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossTerms:
    loss: torch.Tensor  # (n,) per-token loss
    clipped: torch.Tensor  # (n,) bool, the clip was active
    kl: torch.Tensor  # (n,) k3 estimate, 0 without a reference
    tis_weight: torch.Tensor  # (n,) truncated importance weight


@dataclass(frozen=True)
class LossCoefficients:
    """The numbers both policy losses take beside the log-probs (AlgorithmConfig's, through the
    learner): the ratio's clips, the importance weight's cap, the KL and entropy coefficients."""

    clip_low: float
    clip_high: float
    tis_cap: float
    kl_coef: float = 0.0
    entropy_coef: float = 0.0


def token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantage: torch.Tensor | float,
    coefs: LossCoefficients,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> LossTerms:
    """PPO: loss = -w * min(r A, clip(r, 1 - low, 1 + high) A) + kl_coef * k3 - entropy_coef * H.

    r = exp(logp - old_logp), w = min(exp(old_logp - behaviour_logp), tis_cap) (no grad),
    k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman's unbiased, non-negative KL estimator),
    H the token's entropy (with grad: the bonus raises it).
    Example: logp = log 0.6, old = log 0.5, behaviour = log 0.4, A = 1, clips 0.2/0.28, cap 2:
    r = 1.2, w = 1.25, min(1.2, 1.2) = 1.2 -> loss -1.5. With A = -1 and r = 0.7: the clipped
    term -0.8 is the min, so loss = -1.25 * -0.8 = 1.0 and the clip is active.
    """
    ratio = torch.exp(logp - old_logp)
    weight = torch.clamp(torch.exp(old_logp - behaviour_logp), max=coefs.tis_cap).detach()
    return _surrogate(ratio, weight, advantage, logp, coefs, ref_logp, entropy)


def sequence_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantage: torch.Tensor | float,
    coefs: LossCoefficients,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> LossTerms:
    """GSPO (arXiv 2507.18071) over one sequence's trained tokens, in the paper's token form.

    s = exp(mean_t(logp - old_logp)), the length-normalised sequence ratio, clipped to
    [1 - low, 1 + high] (gspoClip, tiny: 3e-4/4e-4); per token s_t = sg[s] * exp(logp_t -
    sg[logp_t]), equal to s in value, so the clip is all or nothing per sequence, and
    d s_t / d logp_t = s. With aggregation "sequence" (1/|y| per token) the sequence's gradient
    is then exactly d s / d logp = s / |y| per token, the paper's objective and gspo's default
    aggregation (AlgorithmConfig; verl's loss_mode gspo too); "token" weighs each sequence by its
    length instead. The truncated importance weight is per sequence too:
    w = min(exp(mean_t(old_logp - behaviour_logp)), tis_cap), the length-normalised
    proximal/behaviour ratio, so engine/trainer mismatch is corrected at the level GSPO's ratio
    works at, not token by token. KL and the entropy bonus stay per token.
    Example (clips 0.1/0.2, cap 2): logp - old = [0.3, -0.1], old - behaviour = [0.2, 0],
    A = 1: s = w = e^0.1, loss -e^0.2 = -1.2214 per token with gradient -1.2214 each;
    logp - old = [-0.5, 0.1, -0.2], A = -1: s = e^-0.2 = 0.8187 < 0.9, the clipped term -0.9 is
    the min: loss 0.9 per token, gradient 0, clipped.
    """
    seq_log_ratio = (logp - old_logp).mean()
    ratio = torch.exp(seq_log_ratio.detach() + logp - logp.detach())
    seq_weight = torch.exp((old_logp - behaviour_logp).mean()).clamp(max=coefs.tis_cap)
    weight = seq_weight.detach().expand_as(logp)
    return _surrogate(ratio, weight, advantage, logp, coefs, ref_logp, entropy)


def _surrogate(
    ratio: torch.Tensor, weight: torch.Tensor, advantage: torch.Tensor | float,
    logp: torch.Tensor, coefs: LossCoefficients, ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
) -> LossTerms:  # fmt: skip
    adv = torch.as_tensor(advantage, dtype=logp.dtype, device=logp.device)
    unclipped = ratio * adv
    clipped_ratio = torch.clamp(ratio, 1.0 - coefs.clip_low, 1.0 + coefs.clip_high)
    surrogate = torch.minimum(unclipped, clipped_ratio * adv)
    loss = -weight * surrogate
    kl = torch.zeros_like(logp)
    if ref_logp is not None and coefs.kl_coef > 0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1.0
        loss = loss + coefs.kl_coef * kl
    if entropy is not None and coefs.entropy_coef > 0:
        loss = loss - coefs.entropy_coef * entropy
    clipped = (clipped_ratio * adv < unclipped).detach()
    return LossTerms(loss, clipped, kl.detach(), weight)


PolicyLoss = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | float, LossCoefficients,
     torch.Tensor | None, torch.Tensor | None],
    LossTerms,
]  # fmt: skip
POLICY_LOSSES: dict[str, PolicyLoss] = {"ppo": token_loss, "gspo": sequence_loss}
"""algorithm.policyLoss -> its loss function (one signature: log-probs, advantage, coefficients,
reference log-probs, entropy)."""


def token_weights(lengths: list[int]) -> list[float]:
    """Token-level: every token of the batch counts the same. Example: [2, 6] -> [1/8, 1/8]."""
    total = sum(lengths)
    return [1.0 / total if total else 0.0 for _ in lengths]


def sequence_weights(lengths: list[int]) -> list[float]:
    """Sequence-level: mean over tokens, then over sequences. Example: [2, 6] -> [1/4, 1/12]."""
    kept = [n for n in lengths if n > 0]
    return [1.0 / (len(kept) * n) if n else 0.0 for n in lengths]


AGGREGATIONS: dict[str, Callable[[list[int]], list[float]]] = {
    "token": token_weights,
    "sequence": sequence_weights,
}
