"""Checkpoint and exact resume: stop after step 2, resume into fresh objects, and step 3 equals an
uninterrupted run's step 3. Each step samples with the hf engine (so the RNG state matters),
rewards a token bandit, builds its batch as a run does (batch.assemble_batch: successes go into
the replay buffer, an all-fail group gets a stored one) and takes a Learner step.
Tolerance: 1e-6 absolute on loss and grad norm (CPU fp32 is deterministic here; observed 0.0).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from bench.testing.images import screenshot
from kubecua_trainer.config import AlgorithmConfig, ReplayConfig
from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.batch import assemble_batch
from kubecua_trainer.learning.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.tokens import Conversation

ALGO = AlgorithmConfig(
    learning_rate=1e-2,
    group_size=4,
    dynamic_sampling=False,
    replay=ReplayConfig(enabled=True, max_per_task=2),
)
TOL = 1e-6
# Stop ids make lengths vary, so the token-level loss (-sum(A_i * n_i) / N at ratio 1) is not 0.
SAMPLING = SamplingParams(max_new_tokens=4, stop_token_ids=tuple(range(200, 300)))


def _step(policy: Policy, learner: Learner, replay: SuccessReplay, step: int) -> dict[str, float]:
    async def collect() -> Group:
        engine = HFEngine(policy)
        group = Group("t", str(step))
        for e in range(ALGO.group_size):  # sequential: the RNG draws happen in a fixed order
            conv = Conversation(policy, "sys", 56 * 56 * 2)
            conv.add_user("pick", screenshot(step))
            gen = await engine.generate(*conv.prompt(), SAMPLING)
            conv.add_generation(gen)
            episode = EpisodeResult("t", str(step), f"{step}-{e}")
            episode.score(float(sum(100 <= t < 200 for t in gen.token_ids) > 0))
            episode.samples = [conv.to_sample()]
            group.episodes.append(episode)
        await engine.close()
        return group

    batch = assemble_batch([asyncio.run(collect())], ALGO, replay)
    return learner.step(batch.samples)


def _fresh(model_dir: Path) -> tuple[Policy, Learner, SuccessReplay]:
    policy = load_policy(str(model_dir), device="cpu")
    return policy, Learner(policy, ALGO), SuccessReplay(max_per_task=2)


def test_resume_after_step_2_reproduces_step_3(tiny_model_dir: Path, tmp_path: Path) -> None:
    torch.manual_seed(123)
    policy, learner, replay = _fresh(tiny_model_dir)
    straight = [_step(policy, learner, replay, s) for s in (1, 2, 3)]
    final_weights = policy.model.lm_head.weight.detach().clone()  # type: ignore[union-attr]

    torch.manual_seed(123)
    policy, learner, replay = _fresh(tiny_model_dir)
    for s in (1, 2):
        _step(policy, learner, replay, s)
    path = save_checkpoint(tmp_path / "ckpt", 2, policy, learner, replay, extra={"seen": 8})
    torch.manual_seed(999)  # a restart would not have the old RNG state
    del policy, learner, replay

    policy, learner, replay = _fresh(tiny_model_dir)  # fresh random weights until loaded
    assert latest_checkpoint(tmp_path / "ckpt") == path
    state = load_checkpoint(path, policy, learner, replay)
    assert state == {"step": 2, "extra": {"seen": 8}}
    resumed = _step(policy, learner, replay, 3)

    assert abs(straight[2]["loss"]) > 100 * TOL  # a comparison of zeros would prove nothing
    assert resumed["loss"] == pytest.approx(straight[2]["loss"], abs=TOL)
    assert resumed["grad_norm"] == pytest.approx(straight[2]["grad_norm"], abs=TOL)
    assert resumed["tokens"] == straight[2]["tokens"]
    assert torch.allclose(policy.model.lm_head.weight, final_weights, atol=TOL)  # type: ignore[union-attr]


def test_checkpoint_is_an_hf_dir_and_pruning_keeps_newest(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    policy, learner, replay = _fresh(tiny_model_dir)
    root = tmp_path / "ckpt"
    (root / ".tmp-step-00000009-1").mkdir(parents=True)  # a crashed save is never picked
    for step in (1, 2, 3):
        save_checkpoint(root, step, policy, learner, replay)
    assert latest_checkpoint(root) == str(root / "step-00000003")
    reloaded = load_policy(str(root / "step-00000003"), device="cpu")
    assert torch.equal(reloaded.model.lm_head.weight, policy.model.lm_head.weight)  # type: ignore[union-attr]
    assert (root / "step-00000003" / "model.safetensors").is_file()
    assert prune_checkpoints(root, keep=2) == [str(root / "step-00000001")]
    assert latest_checkpoint(tmp_path / "missing") is None
