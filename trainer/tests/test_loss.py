"""The GRPO loss and its gradients against values computed by hand on a small batch.

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

import pytest
import torch

from kubecua_trainer.loss import sequence_weights, token_loss, token_weights

CLIP = {"clip_low": 0.2, "clip_high": 0.28, "tis_cap": 2.0}


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
        t = token_loss(logp, old, behav, adv, kl_coef=kl_coef, ref_logp=ref, **CLIP)
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
