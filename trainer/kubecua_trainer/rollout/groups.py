"""Group sampling: each step plays G episodes of each of its tasks, all concurrently.

Concurrency is bounded by rollout.maxInFlightEpisodes (a semaphore) and by the sandboxes
themselves (SandboxLeases waits when all are busy). Tasks are drawn by a seeded shuffle that walks
the whole task list before repeating, so step s of a resumed run gets the same tasks. The sampling
temperature is the step's (scheduled_temperature), also for a step that plays ahead.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubecua_sandbox_client import starts_agree
from kubecua_trainer.parallel.distributed import episode_owner
from kubecua_trainer.rollout.episode import Rollout, play_episode
from kubecua_trainer.rollout.records import EpisodeResult


@dataclass
class Group:
    task_id: str
    group_id: str
    episodes: list[EpisodeResult] = field(default_factory=list)

    @property
    def scored(self) -> list[EpisodeResult]:
        """Episodes that reached a score (infrastructure failures left out)."""
        return [e for e in self.episodes if not e.excluded]

    @property
    def mixed_start(self) -> bool:
        """Its scored episodes started from different screens (their start fingerprints
        differ): GRPO would compare different problems as one (spec.tasks.mixedStartGroups)."""
        return not starts_agree([e.start_fingerprint for e in self.scored])


def tasks_for_step(tasks: list[dict[str, Any]], step: int, per_step: int, seed: int) -> list[dict]:
    """Tasks of step `step` (1-based): epoch-wise shuffles, deterministic in (seed, step).

    With 3 tasks and 2 per step, steps 1 and 2 cover order[0..1], order[2] + the next epoch's
    first task; every task appears once per epoch.
    """
    n = len(tasks)
    picked = []
    for i in range((step - 1) * per_step, step * per_step):
        epoch, pos = divmod(i, n)
        order = list(range(n))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        picked.append(tasks[order[pos]])
    return picked


def scheduled_temperature(start: float, end: float | None, step: int, steps: int) -> float:
    """The sampling temperature of step `step` (1-based) of `steps`: linear from `start` at step 1
    to `end` at the last step; `end` None keeps `start` (algorithm.temperature, temperatureEnd).

    Example: 0.8 -> 0.5 over 4 steps: 0.8, 0.7, 0.6, 0.5. One step, or a step outside 1..steps,
    gets the nearest end of the line.
    """
    if end is None or steps <= 1:
        return start
    done = min(max(step - 1, 0), steps - 1) / (steps - 1)
    return start + (end - start) * done


async def rollout_groups(
    ro: Rollout,
    tasks: list[dict[str, Any]],
    step: int,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    share: tuple[int, int] = (0, 1),
    temperature: float | None = None,
) -> list[Group]:
    """Play G episodes per task concurrently; return the groups in task order.

    share (rank, world): play only the episodes this rank owns (distributed.episode_owner); the
    groups then hold this rank's members, and the loop gathers the other ranks' (merge_groups).
    temperature: the step's sampling temperature (default algorithm.temperature)."""
    limit = asyncio.Semaphore(ro.rollout.max_in_flight_episodes)
    groups = [Group(str(t.get("id", i)), f"s{step:04d}-g{i:02d}") for i, t in enumerate(tasks)]

    async def one(task: dict[str, Any], group: Group, e: int) -> EpisodeResult:
        async with limit:
            key = f"{group.group_id}-e{e:02d}"
            result = await play_episode(ro, task, group.group_id, key, temperature=temperature)
        if on_episode is not None:
            on_episode(result)
        return result

    rank, world = share
    pairs = [
        (t, g, e)
        for t, g in zip(tasks, groups, strict=True)
        for e in range(ro.algorithm.group_size)
    ]
    jobs = [one(t, g, e) for i, (t, g, e) in enumerate(pairs) if episode_owner(i, world) == rank]
    results = await asyncio.gather(*jobs)
    for r in results:
        next(g for g in groups if g.group_id == r.group_id).episodes.append(r)
    return groups


def merge_groups(per_rank: list[list[Group]]) -> list[Group]:
    """One rank's view of a step from every rank's groups: members joined, in episode order."""
    merged = [Group(g.task_id, g.group_id) for g in per_rank[0]]
    for groups in per_rank:
        for mine, theirs in zip(merged, groups, strict=True):
            mine.episodes += theirs.episodes
    for g in merged:
        g.episodes.sort(key=lambda e: e.key)
    return merged
