"""One device shared by generation and learning (gpu_share.py), on the CPU with the tiny model and
the real embedded engine: a learner chunk (one sample's forward and backward) starts only once the
engine has nothing to run, the wait is bounded so learning never starves, and the shared
learner's weights are bit-equal to the unshared one's. (On the CPU there are no CUDA streams: the
scheduling rule is what runs here; the streams run on the GPU, in make bench-loop.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import torch
from test_learner import make_sample

from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.sharded import generation_copy
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.parallel.gpu_share import GpuShare

ALGO = AlgorithmConfig(learning_rate=1e-2, kl_coef=0.0)


def shared_pair(policy: Policy, max_yield: float) -> tuple[Learner, HFEngine, GpuShare, Policy]:
    """A learner on `policy` and an engine on its own copy (as with maxStaleness >= 1), sharing."""
    gen = generation_copy(policy)
    share = GpuShare(policy.device, max_yield_seconds=max_yield)
    engine = HFEngine(gen, share=share, seed=0)
    learner = Learner(policy, ALGO)
    learner.share = share
    return learner, engine, share, gen


async def queue_while_locked(engine: HFEngine, gen: Policy) -> asyncio.Task:
    """A request the engine holds but cannot admit: gen.lock is held by the caller's thread."""
    task = asyncio.create_task(engine.generate([5, 6, 7, 8], [], SamplingParams(max_new_tokens=4)))
    await asyncio.sleep(0)  # generate() hands it to the worker, then awaits its future
    assert engine.admissible() == engine.work() == 1
    return task


def test_a_learner_chunk_starts_only_once_the_engine_has_served_its_waiting_request(
    policy: Policy,
) -> None:
    learner, engine, share, gen = shared_pair(policy, max_yield=30.0)
    samples = [make_sample(policy, 1, 1.0), make_sample(policy, 2, -1.0)]

    async def scenario() -> tuple[dict[str, float], float]:
        gen.lock.acquire()  # the engine's round waits here with the request pending
        try:
            generation = await queue_while_locked(engine, gen)
            stepping = asyncio.create_task(asyncio.to_thread(learner.step, samples))
            assert await asyncio.to_thread(share.yielding.wait, 30.0)  # the first chunk waits
            assert not share.chunks  # no chunk has started
            released = time.time()
        finally:
            gen.lock.release()
        result = await generation
        assert len(result.token_ids) >= 1
        metrics = await stepping
        await engine.close()
        return metrics, released

    metrics, released = asyncio.run(scenario())
    chunks = list(share.chunks)
    assert len(chunks) == 2  # one a sample
    assert chunks[0].started >= released  # not before the engine could run again
    assert chunks[0].waited > 0  # it waited, until the engine idled
    assert chunks[0].engine_work == 0
    assert all(c.engine_work == 0 for c in chunks)  # no chunk started with the engine busy
    assert metrics["share_chunks"] == 2
    assert metrics["share_yields"] >= 1
    assert metrics["share_yield_timeouts"] == 0
    assert metrics["share_yield_seconds"] >= chunks[0].waited
    assert engine.scheduler is not None
    assert engine.scheduler.taken == engine.scheduler.admitted == 1  # it did admit


def test_learning_never_starves_behind_an_engine_that_stays_busy(policy: Policy) -> None:
    """The engine stays locked out for the whole step: each chunk waits its bound and goes."""
    bound = 0.1
    learner, engine, share, gen = shared_pair(policy, max_yield=bound)
    samples = [make_sample(policy, 3, 1.0), make_sample(policy, 4, -1.0)]

    async def scenario() -> dict[str, float]:
        gen.lock.acquire()
        try:
            generation = await queue_while_locked(engine, gen)
            metrics = await asyncio.to_thread(learner.step, samples)
        finally:
            gen.lock.release()
        await generation  # served once the engine may run
        await engine.close()
        return metrics

    metrics = asyncio.run(scenario())
    assert metrics["share_chunks"] == 2
    assert metrics["share_yield_timeouts"] == 2  # both started at the bound, request waiting
    assert all(bound <= c.waited < bound + 5.0 for c in share.chunks)
    assert metrics["grad_norm"] > 0  # and learned


def test_the_shared_learner_steps_to_the_same_bits_as_the_unshared_one(
    tiny_model_dir: Path,
) -> None:
    """Three steps each, the shared learner beside a live engine that generates between them:
    every parameter equal bit for bit (the rule moves a chunk in time, not in the sum)."""
    torch.manual_seed(0)
    plain = load_policy(str(tiny_model_dir), device="cpu")
    shared = load_policy(str(tiny_model_dir), device="cpu")
    alone = Learner(plain, ALGO)
    learner, engine, _, _ = shared_pair(shared, max_yield=0.2)
    batches = [[make_sample(plain, 10 * k + i, (-1.0) ** i) for i in range(3)] for k in range(3)]

    async def steps() -> None:
        for batch in batches:
            generation = engine.generate([9, 10, 11], [], SamplingParams(max_new_tokens=6))
            learned, _ = await asyncio.gather(asyncio.to_thread(learner.step, batch), generation)
            assert learned["share_chunks"] == len(batch)
            alone.step(batch)
        await engine.close()

    asyncio.run(steps())
    pairs = zip(plain.model.named_parameters(), shared.model.named_parameters(), strict=True)
    for (name, a), (_, b) in pairs:
        assert torch.equal(a, b), name


def test_the_adaptive_bound_halves_when_rollouts_wait_and_doubles_when_the_learner_does() -> None:
    """adapt(): between steps, within [MIN_YIELD_SECONDS, the bound given]; a fixed share (the
    default) never moves."""
    from kubecua_trainer.parallel import gpu_share

    share = GpuShare(torch.device("cpu"), 1.0, adaptive=True)
    for _ in range(10):
        share.adapt(rollouts_ready=True)
    assert share.max_yield_seconds == gpu_share.MIN_YIELD_SECONDS
    for _ in range(10):
        share.adapt(rollouts_ready=False)
    assert share.max_yield_seconds == 1.0  # never above the bound it was given
    assert share.step_stats()["share_yield_bound"] == 1.0
    fixed = GpuShare(torch.device("cpu"), 1.0)
    fixed.adapt(rollouts_ready=True)
    assert fixed.max_yield_seconds == 1.0
