"""Learning sanity on a synthetic bandit (no desktop): reward rises within a few GRPO steps.

The "environment" (bench/testing/bandit.py) rewards the fraction of generated tokens that fall in a
fixed set of 40 ids (about 9% of the tiny vocabulary, so a random policy scores ~0.09). Rewards
only rise if the gradient has the right sign and the loss mask points at the sampled tokens. Runs
the real pieces: hf engine (batched), Conversation, batch.assemble_batch (the groups, advantages
and dynamic sampling a run trains with), Learner.
"""

from __future__ import annotations

import asyncio

import torch

from bench.testing.bandit import play_bandit
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.batch import assemble_batch, episodes_of
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.model import Policy

GROUP, TASKS, STEPS, NEW_TOKENS = 8, 2, 12, 3


def test_reward_rises_on_a_token_bandit(policy: Policy) -> None:
    torch.manual_seed(0)
    algo = AlgorithmConfig(learning_rate=2e-2, group_size=GROUP, kl_coef=0.0)
    learner = Learner(policy, algo)

    async def train() -> list[float]:
        engine = HFEngine(policy)
        means = []
        for step in range(STEPS):
            groups = await play_bandit(engine, policy, step, TASKS, GROUP, NEW_TOKENS)
            rewards = [float(e.reward or 0.0) for e in episodes_of(groups)]
            means.append(sum(rewards) / len(rewards))
            batch = assemble_batch(groups, algo, None)
            assert batch.groups - batch.zero_variance_groups == len(batch.samples) // GROUP
            metrics = await asyncio.to_thread(learner.step, batch.samples)
            assert metrics["tokens"] == NEW_TOKENS * len(batch.samples)
        await engine.close()
        return means

    means = asyncio.run(train())
    first, last = sum(means[:3]) / 3, sum(means[-3:]) / 3
    assert first < 0.25, means
    assert last > first + 0.3, means  # e.g. 0.09 -> 0.6+
