"""The spec's learner levers (model.freezeVision, trainer.optimizerOffload) act on a real
tiny model: a frozen vision encoder keeps its weights through a step while the language model
moves, and the offloaded optimizer keeps its fp32 master state in host memory."""

from __future__ import annotations

from pathlib import Path

import torch
from test_learner import make_sample

from kubecua_trainer.config import TrainingRunSpec
from kubecua_trainer.perf.optimizer import MasterAdamW
from kubecua_trainer.train import build_learner


def spec(model_dir: Path, **extra: dict) -> TrainingRunSpec:
    raw = {
        "model": {"path": str(model_dir), "dtype": "float32", **extra.get("model", {})},
        "sandboxes": {"urls": ["http://127.0.0.1:1"]},
        "tasks": {"path": "."},
        "algorithm": {"learningRate": 1e-3},
        "trainer": {"gradientCheckpointing": False, **extra.get("trainer", {})},
        "steps": 1,
    }
    return TrainingRunSpec.model_validate(raw)


def test_frozen_vision_keeps_its_weights_while_the_language_model_learns(tiny_model_dir):
    policy, learner = build_learner(
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
    _, learner = build_learner(spec(tiny_model_dir))
    assert type(learner.optimizer) is torch.optim.AdamW


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)
