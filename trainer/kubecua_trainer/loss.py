"""The per-token GRPO loss and its aggregation over a batch.

Three policies appear per token: the current one (logp, with grad), the proximal one the batch was
collected against as recomputed by the trainer (old_logp), and the engine's behaviour policy
(behaviour_logp). The PPO ratio is current/proximal with separate low and high clips (DAPO
clip-higher); a truncated importance weight min(proximal/behaviour, cap) corrects for engine and
trainer numerics (or weights) disagreeing. With one optimizer step per batch the proximal policy
is the current one detached, so the ratio is 1 at the step and its gradient is grad logp.
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


def token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantage: torch.Tensor | float,
    clip_low: float,
    clip_high: float,
    tis_cap: float,
    kl_coef: float = 0.0,
    ref_logp: torch.Tensor | None = None,
) -> LossTerms:
    """loss = -w * min(r A, clip(r, 1 - low, 1 + high) A) + kl_coef * k3.

    r = exp(logp - old_logp), w = min(exp(old_logp - behaviour_logp), tis_cap) (no grad),
    k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman's unbiased, non-negative KL estimator).
    Example: logp = log 0.6, old = log 0.5, behaviour = log 0.4, A = 1, clips 0.2/0.28, cap 2:
    r = 1.2, w = 1.25, min(1.2, 1.2) = 1.2 -> loss -1.5. With A = -1 and r = 0.7: the clipped
    term -0.8 is the min, so loss = -1.25 * -0.8 = 1.0 and the clip is active.
    """
    ratio = torch.exp(logp - old_logp)
    adv = torch.as_tensor(advantage, dtype=logp.dtype, device=logp.device)
    unclipped = ratio * adv
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.minimum(unclipped, clipped_ratio * adv)
    weight = torch.clamp(torch.exp(old_logp - behaviour_logp), max=tis_cap).detach()
    loss = -weight * surrogate
    kl = torch.zeros_like(logp)
    if ref_logp is not None and kl_coef > 0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1.0
        loss = loss + kl_coef * kl
    clipped = (clipped_ratio * adv < unclipped).detach()
    return LossTerms(loss, clipped, kl.detach(), weight)


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
