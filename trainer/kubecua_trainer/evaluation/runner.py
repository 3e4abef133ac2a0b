"""Play the held-out episodes of one evaluation with the run's own episode machinery.

An evaluation episode is a training episode with other settings: the same leases, token,
deadline and infrastructure-failure rules (rollout/episode.py), with the evaluation's maxTurns
and temperature (0 = greedy) and no temperature schedule. Its samples are dropped as soon as it
ends: nothing of it reaches the learner or the replay buffer.

Reproducibility: at temperature 0 the figures depend on the weights and the desktops only. Above
0, the embedded engine samples from torch's generator, seeded per evaluation from (spec.seed,
step, rank); draws still depend on how concurrent episodes share batches, so they repeat exactly
when one episode plays at a time (one sandbox, or rollout.maxInFlightEpisodes 1). sglang
samples on its servers, unseeded by this. With rollout.maxStaleness > 0 the next steps' episodes
play during the evaluation and draw from the same seeded generator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch

from kubecua_trainer.config import EvaluationConfig
from kubecua_trainer.parallel.distributed import episode_owner
from kubecua_trainer.rollout.episode import Rollout, play_episode
from kubecua_trainer.rollout.records import EpisodeResult


def eval_rollout(ro: Rollout, cfg: EvaluationConfig) -> Rollout:
    """The run's Rollout with the evaluation's sampling: a copy, the run's own is untouched."""
    algorithm = ro.algorithm.model_copy(
        update={
            "max_turns": cfg.max_turns or ro.algorithm.max_turns,
            "temperature": cfg.temperature,  # 0: greedy (engines treat <= 0 as argmax)
            "temperature_end": None,  # a training schedule does not apply
        }
    )
    return dataclasses.replace(ro, algorithm=algorithm)


def episode_key(step: int, task_index: int, episode: int) -> str:
    """ "eval-s0003-t002-e01": unique in a run, and never a training key ("s0003-g02-e01")."""
    return f"eval-s{step:04d}-t{task_index:03d}-e{episode:02d}"


async def play_evaluation(
    ro: Rollout,
    tasks: list[dict[str, Any]],
    step: int,
    per_task: int,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    share: tuple[int, int] = (0, 1),
) -> list[EpisodeResult]:
    """per_task episodes of every task, concurrently (rollout.maxInFlightEpisodes at most);
    share (rank, world): only the episodes this rank owns. Returned in key order."""
    limit = asyncio.Semaphore(ro.rollout.max_in_flight_episodes)

    async def one(task: dict[str, Any], t: int, e: int) -> EpisodeResult:
        key = episode_key(step, t, e)
        async with limit:
            result = await play_episode(ro, task, key.rsplit("-", 1)[0], key)
        result.samples = []  # never trained: free the token tensors and pixels now
        if on_episode is not None:
            on_episode(result)
        return result

    rank, world = share
    jobs = [(task, t, e) for t, task in enumerate(tasks) for e in range(per_task)]
    mine = [one(*job) for n, job in enumerate(jobs) if episode_owner(n, world) == rank]
    # return_exceptions: cancelled (a stop), gather returns only once every episode has handed
    # its sandbox back; without it, it returns at the first episode cancelled in its queue.
    played = await asyncio.gather(*mine, return_exceptions=True)
    for outcome in played:
        if isinstance(outcome, BaseException):
            raise outcome
    return sorted((r for r in played if isinstance(r, EpisodeResult)), key=lambda r: r.key)


def sampling_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of one evaluation's sampling, a pure function of (spec.seed, step, rank), so an
    evaluation repeated with the same weights samples the same (string seeds hash with SHA-512,
    the same in every process)."""
    return random.Random(f"kubecua-eval:{seed}:{step}:{rank}").getrandbits(63)


@contextlib.contextmanager
def seeded_sampling(seed: int) -> Iterator[None]:
    """Seed python's and torch's generators for an evaluation, then restore them as they were:
    evaluating never shifts the training run's random stream (a resumed run, which may evaluate
    or skip an evaluation, samples the same training episodes either way)."""
    state = random.getstate()
    devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(state)
