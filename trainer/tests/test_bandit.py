"""Learning sanity on a synthetic bandit (no desktop): reward rises within a few GRPO steps.

The "environment" rewards the fraction of generated tokens that fall in a fixed set of 40 ids
(about 9% of the tiny vocabulary, so a random policy scores ~0.09). Rewards only rise if the
gradient has the right sign and the loss mask points at the sampled tokens. Runs the real pieces:
hf engine (batched), Conversation, group advantages, Learner.
"""

from __future__ import annotations

import asyncio

import torch

from kubecua_trainer.advantage import assign_group_advantages
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learner import Learner
from kubecua_trainer.model import Policy
from kubecua_trainer.testing.images import screenshot
from kubecua_trainer.tokens import Conversation, Sample

TARGET = set(range(100, 140))
GROUP, TASKS, STEPS, NEW_TOKENS = 8, 2, 12, 3


async def _collect(engine: HFEngine, policy: Policy, step: int) -> list[Sample]:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=NEW_TOKENS)
    convs = []
    for task in range(TASKS):
        for _ in range(GROUP):
            conv = Conversation(policy, "Answer.", 56 * 56 * 2)
            conv.add_user(f"task {task}", screenshot(task))
            convs.append((task, conv))
    gens = await asyncio.gather(*(engine.generate(*c.prompt(), sampling) for _, c in convs))
    samples = []
    for (task, conv), gen in zip(convs, gens, strict=True):
        conv.add_generation(gen)
        s = conv.to_sample()
        s.reward = sum(t in TARGET for t in gen.token_ids) / NEW_TOKENS
        s.group_id, s.task_id = f"{step}-{task}", str(task)
        samples.append(s)
    return samples


def test_reward_rises_on_a_token_bandit(policy: Policy) -> None:
    torch.manual_seed(0)
    algo = AlgorithmConfig(learning_rate=2e-2, group_size=GROUP, kl_coef=0.0)
    learner = Learner(policy, algo)

    async def train() -> list[float]:
        engine = HFEngine(policy)
        means = []
        for step in range(STEPS):
            samples = await _collect(engine, policy, step)
            means.append(sum(s.reward for s in samples) / len(samples))
            kept, _ = assign_group_advantages(samples, algo.normalize_std, algo.dynamic_sampling)
            metrics = await asyncio.to_thread(learner.step, kept)
            assert metrics["tokens"] == NEW_TOKENS * len(kept)
        await engine.close()
        return means

    means = asyncio.run(train())
    first, last = sum(means[:3]) / 3, sum(means[-3:]) / 3
    assert first < 0.25, means
    assert last > first + 0.3, means  # e.g. 0.09 -> 0.6+
