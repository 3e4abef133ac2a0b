"""The Learner on the tiny model: its loss equals the formula on recomputed log-probs, corrupted
samples are rejected before any update, gradient checkpointing changes no gradient, and the k3 KL
to a frozen reference starts at 0 and grows as the policy moves, and a resumed optimizer steps
at the spec's learning rate, not the one its checkpoint was saved with."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.testing.images import screenshot
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import Generation
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tokens import Conversation, Sample


def make_sample(policy: Policy, seed: int, advantage: float, n_tokens: int = 5) -> Sample:
    conv = Conversation(policy, "sys", 56 * 56 * 2)
    conv.add_user(f"task {seed}", screenshot(seed))
    ids = [(seed * 7 + i * 13) % 400 + 20 for i in range(n_tokens)]
    conv.add_generation(Generation(ids, [-6.0 + 0.1 * i for i in range(n_tokens)], "length"))
    sample = conv.to_sample()
    sample.advantage = advantage
    return sample


def test_loss_equals_tis_weighted_advantage_at_ratio_one(policy: Policy) -> None:
    algo = AlgorithmConfig(learning_rate=1e-3, tis_cap=2.0)
    samples = [make_sample(policy, 1, 1.0, 3), make_sample(policy, 2, -0.5, 5)]
    expected, tokens = 0.0, 8
    for s in samples:
        with torch.no_grad():
            logp, _ = token_logprobs(policy, s)
        w = torch.clamp(torch.exp(logp - s.behaviour_logprobs[s.loss_mask]), max=2.0)
        expected += float(-(w * s.advantage).sum()) / tokens
    before = policy.model.lm_head.weight.detach().clone()  # type: ignore[union-attr]
    metrics = Learner(policy, algo).step(samples)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["tokens"] == tokens
    assert metrics["clip_fraction"] == 0.0
    assert metrics["grad_norm"] > 0
    assert metrics["kl"] == 0.0
    assert not torch.equal(before, policy.model.lm_head.weight)  # type: ignore[union-attr]


def test_corrupted_sample_is_rejected_before_any_update(policy: Policy) -> None:
    good, bad = make_sample(policy, 1, 1.0), make_sample(policy, 2, -1.0)
    bad.image_grid_thw = bad.image_grid_thw * torch.tensor([1, 2, 1])  # type: ignore[operator]
    before = [p.detach().clone() for p in policy.model.parameters()]
    with pytest.raises(ValueError, match="corrupted sample"):
        Learner(policy, AlgorithmConfig()).step([good, bad])
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True))


def test_gradient_checkpointing_gives_the_same_step(tiny_model_dir: Path) -> None:
    results = []
    for gc in (False, True):
        policy = load_policy(str(tiny_model_dir), device="cpu", gradient_checkpointing=gc)
        samples = [make_sample(policy, 3, 1.0), make_sample(policy, 4, -1.0)]
        results.append(Learner(policy, AlgorithmConfig()).step(samples))
    assert results[0]["grad_norm"] == pytest.approx(results[1]["grad_norm"], rel=1e-5)
    assert results[0]["loss"] == pytest.approx(results[1]["loss"], rel=1e-5)


def test_kl_to_reference_starts_at_zero_and_grows(tiny_model_dir: Path) -> None:
    policy = load_policy(str(tiny_model_dir), device="cpu")
    reference = load_policy(str(tiny_model_dir), device="cpu")
    algo = AlgorithmConfig(learning_rate=1e-2, kl_coef=0.1)
    learner = Learner(policy, algo, reference=reference)
    samples = [make_sample(policy, 5, 1.0), make_sample(policy, 6, -1.0)]
    kls = [learner.step(samples)["kl"] for _ in range(3)]
    assert kls[0] == pytest.approx(0.0, abs=1e-7)
    assert kls[2] > kls[1] > 1e-6
    with pytest.raises(ValueError, match="reference"):
        Learner(policy, algo)


def test_a_resumed_optimizer_takes_the_specs_learning_rate_not_the_checkpoints(
    tiny_model_dir: Path,
) -> None:
    """A checkpoint's optimizer state carries its param_groups' lr. A learner at lr 1e-30 (the
    learning-rate-0 control) loading a state saved at 3e-4 must step at 1e-30: its weights
    stay as they were, bit for bit (one step at 3e-4 from the same state moves them)."""
    policy = load_policy(str(tiny_model_dir), device="cpu")
    first = Learner(policy, AlgorithmConfig(learning_rate=3e-4))
    first.step([make_sample(policy, 5, 1.0), make_sample(policy, 6, -1.0)])  # moments to load
    saved = first.state_dict()
    samples = [make_sample(policy, 7, 1.0), make_sample(policy, 8, -1.0)]
    moved = {}
    for lr in (1e-30, 3e-4):
        before = [p.detach().clone() for p in policy.model.parameters()]
        learner = Learner(policy, AlgorithmConfig(learning_rate=lr))
        learner.load_state_dict(saved)
        assert [g["lr"] for g in learner.optimizer.param_groups] == [lr]
        learner.step(samples)
        moved[lr] = any(
            not torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True)
        )
        for p, b in zip(policy.model.parameters(), before, strict=True):
            p.data.copy_(b)  # the same start for the other learning rate
    assert moved == {1e-30: False, 3e-4: True}
