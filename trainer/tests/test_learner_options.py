"""The spec's learner levers (model.freezeVision, trainer.optimizerOffload) act on a real
tiny model: a frozen vision encoder keeps its weights through a step while the language model
moves, and the offloaded optimizer keeps its fp32 master state in host memory; overlapping
rollouts generate from their own copy of the weights."""

from __future__ import annotations

from pathlib import Path

import torch
from test_learner import make_sample

from kubecua_trainer.config import TrainingRunSpec
from kubecua_trainer.perf.optimizer import MasterAdamW
from kubecua_trainer.sharded import refresh_weights
from kubecua_trainer.train import build_learner


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
    assert all(torch.equal(a, b) for a, b in zip(vision_before, visual.parameters(), strict=True))
    assert not torch.equal(head_before, policy.model.lm_head.weight)  # type: ignore[union-attr]
    masters = [t for group in learner.optimizer.state_dict().values() for t in _tensors(group)]
    assert masters
    assert all(t.device.type == "cpu" for t in masters)


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


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)
