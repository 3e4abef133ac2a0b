"""The GRPO loss (PPO's and GSPO's) and its gradients, and the entropy bonus, against values
computed by hand on small batches.

Batch (clip low 0.2, high 0.28, TIS cap 2):
  seq 1, A = +1: token probs now/old/behaviour = .6/.5/.4, .3/.5/.5, .5/.5/.1
  seq 2, A = -1: .35/.5/.5, reference prob .5
Per token: r = now/old, w = min(old/behaviour, 2), loss = -w * min(r A, clip(r) A):
  1: r 1.2, w 1.25, loss -1.5, dloss/dlogp = -w A r = -1.5
  2: r 0.6, w 1,    loss -0.6, grad -0.6 (below 1 - low but A > 0: the min keeps r, not clipped)
  3: r 1,   w 2 (5 capped), loss -2, grad -2
  4: r 0.7, A -1: clip(r) = 0.8 gives the min -0.8 -> loss 0.8, grad 0, clipped
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.logprobs import _chunk_logprobs
from kubecua_trainer.learning.loss import (
    AGGREGATIONS,
    LossCoefficients,
    sequence_loss,
    sequence_weights,
    token_loss,
    token_weights,
)

CLIP = LossCoefficients(clip_low=0.2, clip_high=0.28, tis_cap=2.0)


def _log(*p: float) -> torch.Tensor:
    return torch.tensor([math.log(x) for x in p], dtype=torch.float64)


def _batch() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    return [
        (_log(0.6, 0.3, 0.5).requires_grad_(), _log(0.5, 0.5, 0.5), _log(0.4, 0.5, 0.1), 1.0),
        (_log(0.35).requires_grad_(), _log(0.5), _log(0.5), -1.0),
    ]


def _aggregate(weights_fn, kl_coef: float = 0.0):  # type: ignore[no-untyped-def]
    batch = _batch()
    weights = weights_fn([len(b[0]) for b in batch])
    total = torch.zeros((), dtype=torch.float64)
    terms = []
    for (logp, old, behav, adv), w in zip(batch, weights, strict=True):
        ref = _log(0.5) if adv < 0 else None
        t = token_loss(logp, old, behav, adv, replace(CLIP, kl_coef=kl_coef), ref_logp=ref)
        terms.append(t)
        total = total + t.loss.sum() * w
    total.backward()
    return total, [b[0].grad for b in batch], terms


def test_per_token_loss_clip_and_tis_weights() -> None:
    _, _, terms = _aggregate(token_weights)
    assert terms[0].loss.tolist() == pytest.approx([-1.5, -0.6, -2.0])
    assert terms[1].loss.tolist() == pytest.approx([0.8])
    assert terms[0].tis_weight.tolist() == pytest.approx([1.25, 1.0, 2.0])
    assert terms[0].clipped.tolist() == [False, False, False]
    assert terms[1].clipped.tolist() == [True]


def test_token_aggregation_value_and_gradient() -> None:
    total, grads, _ = _aggregate(token_weights)
    assert float(total.detach()) == pytest.approx((-1.5 - 0.6 - 2.0 + 0.8) / 4)
    assert grads[0].tolist() == pytest.approx([-1.5 / 4, -0.6 / 4, -2.0 / 4])
    assert grads[1].tolist() == pytest.approx([0.0])


def test_sequence_aggregation_value_and_gradient() -> None:
    total, grads, _ = _aggregate(sequence_weights)
    assert float(total.detach()) == pytest.approx(((-1.5 - 0.6 - 2.0) / 3 + 0.8) / 2)
    assert grads[0].tolist() == pytest.approx([-1.5 / 6, -0.6 / 6, -2.0 / 6])
    assert grads[1].tolist() == pytest.approx([0.0])


def test_k3_kl_penalty_value_and_gradient() -> None:
    # delta = log(.5/.35) = 0.356675; k3 = e^delta - delta - 1 = 0.071897
    # d(coef * k3)/dlogp = coef * (1 - e^delta) = 0.1 * (1 - 1.428571) = -0.0428571
    total, grads, terms = _aggregate(token_weights, kl_coef=0.1)
    assert terms[1].kl.tolist() == pytest.approx([0.071897], rel=1e-5)
    assert float(total.detach()) == pytest.approx(
        (-1.5 - 0.6 - 2.0 + 0.8 + 0.1 * 0.071897) / 4, rel=1e-6
    )
    assert grads[1].tolist() == pytest.approx([-0.0428571 / 4], rel=1e-5)


def test_aggregation_weights() -> None:
    assert token_weights([2, 6]) == pytest.approx([1 / 8, 1 / 8])
    assert sequence_weights([2, 6]) == pytest.approx([1 / 4, 1 / 12])
    assert sequence_weights([2, 0]) == pytest.approx([1 / 2, 0.0])


# GSPO batch (clip low 0.1, high 0.2, TIS cap 2), log-ratios given per token:
#   seq 1, A = +1: logp - old = [0.3, -0.1], old - behaviour = [0.2, 0.0]
#     s = e^mean = e^0.1 = 1.105171 in [0.9, 1.2]; w = e^0.1 (one per sequence, not e^0.2, e^0)
#     per token -w * s * A = -e^0.2 = -1.221403; d/dlogp_t = -w * A * s (s_t = sg[s] pi/sg[pi])
#   seq 2, A = -1: logp - old = [-0.5, 0.1, -0.2] -> s = e^-0.2 = 0.818731 < 0.9, w = 1
#     min(-0.818731, -0.9) = -0.9 (clipped) -> loss 0.9 per token, gradient 0
#   seq 3, A = +1: logp - old = [0.2, 0.4] -> s = e^0.3 = 1.349859 > 1.2: min(1.349859, 1.2)
#     = 1.2 (clipped); old - behaviour = [1.0, 0.8] -> e^0.9 = 2.459603, capped at 2
#     -> loss -2.4 per token, gradient 0
GSPO_CLIP = LossCoefficients(clip_low=0.1, clip_high=0.2, tis_cap=2.0)


def _gspo_batch() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    """(logp with grad, old, behaviour, A): old = log 0.5 everywhere, logp = old + log-ratio."""
    rows = [([0.3, -0.1], [0.2, 0.0], 1.0), ([-0.5, 0.1, -0.2], [0.0] * 3, -1.0),
            ([0.2, 0.4], [1.0, 0.8], 1.0)]  # fmt: skip
    out = []
    for ratio, tis, adv in rows:
        old = torch.full((len(ratio),), math.log(0.5), dtype=torch.float64)
        logp = (old + torch.tensor(ratio, dtype=torch.float64)).requires_grad_()
        out.append((logp, old, old - torch.tensor(tis, dtype=torch.float64), adv))
    return out


def _gspo(weights_fn):  # type: ignore[no-untyped-def]
    batch = _gspo_batch()
    weights = weights_fn([len(b[0]) for b in batch])
    total = torch.zeros((), dtype=torch.float64)
    terms = []
    for (logp, old, behav, adv), w in zip(batch, weights, strict=True):
        terms.append(sequence_loss(logp, old, behav, adv, GSPO_CLIP))
        total = total + terms[-1].loss.sum() * w
    total.backward()
    return total, [b[0].grad for b in batch], terms


def test_gspo_sequence_ratio_clip_and_sequence_tis_weight() -> None:
    _, _, terms = _gspo(sequence_weights)
    assert terms[0].loss.tolist() == pytest.approx([-1.221403, -1.221403], rel=1e-6)
    assert terms[0].tis_weight.tolist() == pytest.approx([1.105171, 1.105171], rel=1e-6)
    assert terms[0].clipped.tolist() == [False, False]
    assert terms[1].loss.tolist() == pytest.approx([0.9, 0.9, 0.9])
    assert terms[1].clipped.tolist() == [True, True, True]
    assert terms[2].loss.tolist() == pytest.approx([-2.4, -2.4])
    assert terms[2].tis_weight.tolist() == pytest.approx([2.0, 2.0])
    assert terms[2].clipped.tolist() == [True, True]


def test_gspo_gradient_is_the_sequence_ratios_own_with_sequence_aggregation() -> None:
    # sequence weights 1/6, 1/9, 1/6 (3 sequences of 2, 3, 2 tokens):
    # total = 2 * -1.221403 / 6 + 3 * 0.9 / 9 + 2 * -2.4 / 6 = -0.907134
    # seq 1: d(-w A e^mean(logp - old)) / dlogp_t / 3 = -w A s / 2 / 3 = -1.221403 / 6 = -0.203567,
    # what the token form's per-token gradient -w A s times the weight 1/6 gives
    total, grads, _ = _gspo(sequence_weights)
    assert float(total.detach()) == pytest.approx(-0.907134, rel=1e-6)
    assert grads[0].tolist() == pytest.approx([-0.203567, -0.203567], rel=1e-5)
    assert grads[1].tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert grads[2].tolist() == pytest.approx([0.0, 0.0])


def test_gspo_with_token_aggregation_weighs_sequences_by_length() -> None:
    # every token 1/7: total = (2 * -1.221403 + 3 * 0.9 + 2 * -2.4) / 7 = -0.648972
    total, grads, _ = _gspo(token_weights)
    assert float(total.detach()) == pytest.approx(-0.648972, rel=1e-6)
    assert grads[0].tolist() == pytest.approx([-1.221403 / 7] * 2, rel=1e-6)


def test_gspo_defaults_to_the_papers_sequence_mean_token_mean() -> None:
    """policyLoss gspo without aggregation takes the paper's (and verl's loss_mode gspo):
    sequence weights 1/6, 1/9, 1/6 give -0.907134, not token's -0.648972 (the tests above);
    ppo keeps token; an explicit aggregation is kept. Lengths [2, 6]: sequence [1/4, 1/12],
    token [1/8, 1/8]."""
    gspo = AlgorithmConfig(policy_loss="gspo")
    total, _, _ = _gspo(AGGREGATIONS[gspo.aggregation])
    assert float(total.detach()) == pytest.approx(-0.907134, rel=1e-6)
    assert AGGREGATIONS[gspo.aggregation]([2, 6]) == pytest.approx([1 / 4, 1 / 12])
    assert AGGREGATIONS[AlgorithmConfig().aggregation]([2, 6]) == pytest.approx([1 / 8, 1 / 8])
    kept = AlgorithmConfig(policy_loss="gspo", aggregation="token")
    total, _, _ = _gspo(AGGREGATIONS[kept.aggregation])
    assert float(total.detach()) == pytest.approx(-0.648972, rel=1e-6)


def test_entropy_bonus_lowers_the_loss_by_coef_times_entropy() -> None:
    # the PPO batch's first sequence, entropies [0.5, 1.0, 2.0], coef 0.1: loss - 0.1 * H
    logp, old, behav, adv = _batch()[0]
    entropy = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    t = token_loss(logp, old, behav, adv, replace(CLIP, entropy_coef=0.1), entropy=entropy)
    assert t.loss.tolist() == pytest.approx([-1.55, -0.7, -2.2])
    t.loss.sum().backward()
    assert entropy.grad is not None
    assert entropy.grad.tolist() == pytest.approx([-0.1, -0.1, -0.1])


def test_entropy_has_a_gradient_and_the_bonus_raises_it() -> None:
    # logits [2, 0, 0] (hidden 1, LM head rows 2, 0, 0) at T = 1, a 4th token banned:
    # p = [e^2, 1, 1] / (e^2 + 2) = [0.786986, 0.106507, 0.106507]
    # H = 0.786986 * 0.239545 + 2 * 0.106507 * 2.239545 = 0.665573
    # dH/dz_j = -p_j (log p_j + H) = [-0.335278, 0.167639, 0.167639]; loss -0.1 H has
    # gradient [0.033528, -0.016764, -0.016764]: descent lowers the top logit, so H rises
    hidden = torch.ones(1, 1, dtype=torch.float64)
    head = torch.tensor([[2.0], [0.0], [0.0], [5.0]], dtype=torch.float64, requires_grad=True)
    logp, entropy = _chunk_logprobs(hidden, torch.tensor([0]), head, 1.0, [3])
    assert logp.tolist() == pytest.approx([-0.239545], rel=1e-5)
    assert entropy.tolist() == pytest.approx([0.665573], rel=1e-5)
    (-0.1 * entropy.sum()).backward()
    assert head.grad is not None
    assert head.grad[:, 0].tolist() == pytest.approx(
        [0.033528, -0.016764, -0.016764, 0.0], rel=1e-4
    )
    with torch.no_grad():
        stepped = head - 1.0 * head.grad
        _, after = _chunk_logprobs(hidden, torch.tensor([0]), stepped, 1.0, [3])
    assert float(after) > 0.665573
