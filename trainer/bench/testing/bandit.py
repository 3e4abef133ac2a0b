"""The token bandit (no desktop): the reward is the fraction of generated ids in a fixed set of 40
(about 9% of the tiny vocabulary, so a random policy scores ~0.09). Rewards rise only if the
gradient has the right sign and the loss mask points at the sampled tokens.

play_bandit returns a step's groups as the rollout does (one EpisodeResult per episode, its one
trajectory sample), so the bandit test, the async-staleness test and the smoke run build their
batches with batch.assemble_batch, the code that trains a run.
"""

from __future__ import annotations

import asyncio

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import Engine, SamplingParams
from kubecua_trainer.model import Policy
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.tokens import Conversation

TARGET = set(range(100, 140))


async def play_bandit(
    engine: Engine,
    policy: Policy,
    step: int,
    tasks: int = 2,
    group_size: int = 8,
    new_tokens: int = 3,
    temperature: float = 1.0,
) -> list[Group]:
    """One step: `group_size` episodes of each of `tasks` prompts, generated concurrently."""
    sampling = SamplingParams(temperature=temperature, max_new_tokens=new_tokens)
    groups = [Group(str(t), f"s{step:04d}-g{t:02d}") for t in range(tasks)]
    convs = []
    for task, group in enumerate(groups):
        for e in range(group_size):
            conv = Conversation(policy, "Answer.", 56 * 56 * 2)
            conv.add_user(f"task {task}", screenshot(task))
            convs.append((group, e, conv))
    gens = await asyncio.gather(*(engine.generate(*c.prompt(), sampling) for _, _, c in convs))
    for (group, e, conv), gen in zip(convs, gens, strict=True):
        conv.add_generation(gen)
        sample = conv.to_sample()
        sample.reward = sum(t in TARGET for t in gen.token_ids) / new_tokens
        sample.group_id, sample.task_id, sample.temperature = (
            group.group_id,
            group.task_id,
            temperature,
        )
        episode = EpisodeResult(group.task_id, group.group_id, f"{group.group_id}-e{e:02d}")
        episode.score(sample.reward)
        episode.samples = [sample]
        group.episodes.append(episode)
    return groups
