"""The spec's learner levers (model.freezeVision, trainer.optimizerOffload) act on a real
tiny model: a frozen vision encoder keeps its weights through a step while the language model
moves, and the offloaded optimizer keeps its fp32 master state in host memory; overlapping
rollouts generate from their own copy of the weights. The algorithm's options (policyLoss gspo,
entropyCoef) reach the loss: GSPO's per-sequence importance weight, an entropy bonus that
raises the entropy of the trained tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_learner import make_sample

from kubecua_trainer.config import AlgorithmConfig, TrainingRunSpec
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.learner_setup import build_learner, defers_update
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.learning.sharded import refresh_weights
from kubecua_trainer.model import Policy
from kubecua_trainer.speedups.optimizer import MasterAdamW


def spec(model_dir: Path, **extra: dict) -> TrainingRunSpec:
    raw = {
        "model": {"path": str(model_dir), "dtype": "float32", **extra.get("model", {})},
        "sandboxes": {"urls": ["http://127.0.0.1:1"]},
        "tasks": {"path": "."},
        "algorithm": {"learningRate": 1e-3},
        "trainer": {"gradientCheckpointing": False, **extra.get("trainer", {})},
        "rollout": extra.get("rollout", {}),
        "steps": 1,
    }
    return TrainingRunSpec.model_validate(raw)


def test_frozen_vision_keeps_its_weights_while_the_language_model_learns(tiny_model_dir):
    policy, learner, _ = build_learner(
        spec(tiny_model_dir, model={"freezeVision": True}, trainer={"optimizerOffload": True})
    )
    assert isinstance(learner.optimizer, MasterAdamW)
    visual = policy.model.model.visual  # type: ignore[union-attr]
    vision_before = [p.detach().clone() for p in visual.parameters()]
    head_before = policy.model.lm_head.weight.detach().clone()  # type: ignore[union-attr]
    metrics = learner.step([make_sample(policy, 1, 1.0), make_sample(policy, 2, -1.0)])
    assert metrics["grad_norm"] > 0
    assert learner.optimizer.defer  # the update may still run: the lock waits for it
    with policy.lock:
        vision_after = [p.detach().clone() for p in visual.parameters()]
        head_after = policy.model.lm_head.weight.detach().clone()  # type: ignore[union-attr]
    assert all(torch.equal(a, b) for a, b in zip(vision_before, vision_after, strict=True))
    assert not torch.equal(head_before, head_after)
    masters = [t for group in learner.optimizer.state_dict().values() for t in _tensors(group)]
    assert masters
    assert all(t.device.type == "cpu" for t in masters)


def test_the_update_is_deferred_only_where_the_next_reader_comes_later(tiny_model_dir):
    """Synchronous rollouts on the embedded engine: after the desktops' set-up; a refreshed copy
    (maxStaleness 1) or sglang's weights on disk need the update at once."""
    offload = {"optimizerOffload": True}
    cases = [({}, True), ({"maxStaleness": 1}, False), ({"engine": "sglang"}, False)]
    for rollout, deferred in cases:
        s = spec(tiny_model_dir, trainer=offload, rollout=rollout)
        assert defers_update(s) is deferred
    _, learner, _ = build_learner(
        spec(tiny_model_dir, trainer=offload, rollout={"maxStaleness": 1})
    )
    assert not learner.optimizer.defer


def test_default_spec_keeps_plain_adamw(tiny_model_dir):
    _, learner, gen = build_learner(spec(tiny_model_dir))
    assert type(learner.optimizer) is torch.optim.AdamW
    assert gen is None  # synchronous rollouts generate with the learner's own module


def test_overlapping_rollouts_generate_from_a_copy_refreshed_after_each_update(tiny_model_dir):
    """maxStaleness > 0 in one process: the engine's copy is not the learner's module (so a
    generation need not wait for an update), and a refresh makes it bitwise the learner's."""
    policy, learner, gen = build_learner(spec(tiny_model_dir, rollout={"maxStaleness": 1}))
    assert gen is not None
    assert gen.model is not policy.model
    learner.step([make_sample(policy, 1, 1.0), make_sample(policy, 2, -1.0)])
    head = policy.model.lm_head.weight  # type: ignore[union-attr]
    assert not torch.equal(gen.model.lm_head.weight, head)  # type: ignore[union-attr]
    refresh_weights(policy.model, gen, 1)
    learned = dict(policy.model.named_parameters())
    assert all(torch.equal(p, learned[n]) for n, p in gen.model.named_parameters())
    assert gen.version == 1


def test_gspo_weighs_each_sequence_by_its_length_normalised_importance_ratio(policy: Policy):
    # at the step the ratio is 1, so per token the loss is -A * min(e^mean(logp - behaviour), 2)
    samples = [make_sample(policy, 1, 1.0, 3), make_sample(policy, 2, -0.5, 5)]
    expected = 0.0
    for s in samples:
        with torch.no_grad():
            logp, _ = token_logprobs(policy, s)
        w = min(float(torch.exp((logp - s.behaviour_logprobs[s.loss_mask]).mean())), 2.0)
        # gspo's default aggregation, sequence: each token 1 / (2 sequences x its length)
        expected += -w * s.advantage * len(logp) / (2 * len(logp))
    algo = AlgorithmConfig(learning_rate=1e-3, policy_loss="gspo")
    assert algo.aggregation == "sequence"
    metrics = Learner(policy, algo).step(samples)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["clip_fraction"] == 0.0


@pytest.mark.parametrize(("coef", "rises"), [(0.0, False), (1.0, True)])
def test_entropy_bonus_alone_raises_the_entropy_of_the_trained_tokens(
    policy: Policy, coef: float, rises: bool
):
    """Advantages 0: without the bonus the loss is 0 and nothing moves; with it the step
    follows the entropy's own gradient (through token_logprobs), and the entropy rises."""
    samples = [make_sample(policy, 1, 0.0), make_sample(policy, 2, 0.0)]
    learner = Learner(policy, AlgorithmConfig(learning_rate=1e-3, entropy_coef=coef))
    before = learner.step(samples)["entropy"]  # measured before its update
    after = learner.step(samples)["entropy"]
    if rises:
        assert after > before + 1e-4, (before, after)
    else:
        assert after == pytest.approx(before, abs=1e-6)


def test_a_greedy_sample_is_refused_before_any_update(policy: Policy):
    greedy = make_sample(policy, 1, 1.0)
    greedy.temperature, greedy.group_id = 0.0, "eval-s0000-t000"  # an evaluation episode's
    before = policy.model.lm_head.weight.detach().clone()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="played greedily"):
        Learner(policy, AlgorithmConfig()).step([make_sample(policy, 2, 1.0), greedy])
    assert torch.equal(before, policy.model.lm_head.weight)  # type: ignore[union-attr]


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)
