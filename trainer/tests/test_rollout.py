"""The rollout against real HTTP sandboxes on loopback with the real tiny model and hf engine:
group sampling, token exactness of what is trained, both training modes, and infrastructure
failures left out of the loss and counted by reason (never reward 0)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import torch
from loopback_sandbox import TOKEN, LoopbackSandbox, task

from kubecua_sandbox_client import SandboxClient
from kubecua_trainer.config import AlgorithmConfig, RolloutConfig
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.model import Policy
from kubecua_trainer.rollout.episode import Rollout, _release
from kubecua_trainer.rollout.groups import rollout_groups
from kubecua_trainer.sources.leases import SandboxLeases

pytestmark = pytest.mark.asyncio


class RecordingEngine:
    """The real hf engine, passed through, keeping what it sampled for the exactness check."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner = inner
        self.generations: list[Generation] = []

    async def generate(self, prompt_ids, images, sampling: SamplingParams) -> Generation:
        gen = await self.inner.generate(prompt_ids, images, sampling)
        self.generations.append(gen)
        return gen

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None: ...

    async def close(self) -> None:
        await self.inner.close()


def make_rollout(
    policy: Policy, urls: list[str], **algo: object
) -> tuple[Rollout, RecordingEngine]:
    leases = SandboxLeases(cooloff_seconds=60)
    leases.set_ready(urls)
    engine = RecordingEngine(HFEngine(policy, max_batch_size=8))
    algorithm = AlgorithmConfig(max_turns=2, max_new_tokens=6, group_size=4, **algo)
    rollout = RolloutConfig(max_pixels=112 * 84, keep_screenshots=2, episode_timeout_seconds=60)
    return Rollout(policy, engine, leases, TOKEN, algorithm, rollout), engine


async def test_group_episodes_run_concurrently_and_train_exactly_what_was_sampled(policy) -> None:
    with LoopbackSandbox() as a, LoopbackSandbox() as b:
        ro, engine = make_rollout(policy, [a.url, b.url])
        try:
            groups = await rollout_groups(ro, [task("t1"), task("t2")], step=1)
        finally:
            await engine.close()
    assert [g.task_id for g in groups] == ["t1", "t2"]
    episodes = [e for g in groups for e in g.episodes]
    assert len(episodes) == 8
    assert all(len(g.episodes) == 4 for g in groups)
    assert a.started + b.started == 8
    assert a.started > 0
    assert b.started > 0
    assert (a.released, b.released) == (a.started, b.started)  # every episode released
    assert Counter(e.outcome for e in episodes).keys() <= {"success", "failure"}
    sampled = [tid for gen in engine.generations for tid in gen.token_ids]
    trained: list[int] = []
    for ep in episodes:
        (sample,) = ep.samples  # trajectory mode: one sample per episode
        assert sample.reward == ep.reward
        assert sample.task_id == ep.task_id
        assert sample.group_id == ep.group_id
        assert int(sample.loss_mask.sum()) == ep.gen_tokens
        trained += sample.input_ids[sample.loss_mask].tolist()
        lp = sample.behaviour_logprobs[sample.loss_mask]
        assert bool((lp <= 0).all())
        assert bool((sample.behaviour_logprobs[~sample.loss_mask] == 0).all())
    assert Counter(trained) == Counter(sampled)  # the learner trains exactly the sampled ids


async def test_per_turn_mode_gives_one_discounted_sample_per_turn(policy) -> None:
    with LoopbackSandbox() as a:
        ro, engine = make_rollout(policy, [a.url], mode="perTurn", turn_discount=0.5)
        ro.algorithm.group_size = 2
        try:
            groups = await rollout_groups(ro, [task("t1")], step=1)
        finally:
            await engine.close()
    for ep in groups[0].episodes:
        turns = len(ep.turns)
        assert len(ep.samples) == turns
        assert [s.reward for s in ep.samples] == [
            ep.reward * 0.5 ** (turns - 1 - t) for t in range(turns)
        ]
        for s, turn in zip(ep.samples, ep.turns, strict=True):
            assert int(s.loss_mask.sum()) == turn.gen_tokens  # only this turn's tokens trained
            assert s.image_grid_thw is not None
            assert s.image_grid_thw.shape[0] <= 2  # keepScreenshots = 2


async def test_infrastructure_failures_are_excluded_and_counted(policy) -> None:
    dead = "http://127.0.0.1:9"  # refuses connections
    with LoopbackSandbox({"setup"}) as broken, LoopbackSandbox({"die"}) as dying:
        ro, engine = make_rollout(policy, [broken.url, dying.url, dead])
        ro.algorithm.group_size = 3
        try:
            groups = await rollout_groups(ro, [task("t1")], step=1)
        finally:
            await engine.close()
    episodes = groups[0].episodes
    outcomes = Counter(e.outcome for e in episodes)
    assert outcomes == Counter({"setup_failed": 2, "sandbox_lost": 1}), outcomes
    assert all(e.excluded and e.reward is None and e.samples == [] for e in episodes)
    assert groups[0].scored == []
    lost = next(e for e in episodes if e.outcome == "sandbox_lost")
    # The dying sandbox drops the connection: refused, or cut while the answer is read (a race).
    assert any(m in lost.detail for m in ("Unreachable", "ConnectError", "ReadError")), lost.detail
    assert ro.leases.counts()["cooling"] == 3  # all three sandboxes cool off


async def test_episode_timeout_is_excluded_and_the_sandbox_released(policy) -> None:
    with LoopbackSandbox({"slow"}) as slow:
        ro, engine = make_rollout(policy, [slow.url])
        ro.rollout.episode_timeout_seconds = 0.5
        ro.algorithm.group_size = 1
        try:
            groups = await rollout_groups(ro, [task("t1")], step=1)
        finally:
            await engine.close()
        (ep,) = groups[0].episodes
        assert ep.outcome == "timeout"
        assert ep.reward is None
        assert ep.samples == []
        # The start timed out before its reply: the episode it started is released by the id
        # the trainer chose, not left to the sandbox's idle timeout. (The DELETE waits for the
        # setup; this client's 0.5 s request timeout gives up on its answer, not on the release.)
        assert slow.started == 1
        await asyncio.to_thread(slow.released_once.wait, 10)
        assert slow.released == 1
        assert slow.episode is None


async def test_a_stop_during_the_start_releases_what_the_sandbox_started(policy) -> None:
    """Cancelled while POST /episodes is in flight (the sandbox sets the task up for 3 s), the
    episode still releases the sandbox, by the id it chose before sending the request."""
    with LoopbackSandbox({"slow"}) as a:
        ro, engine = make_rollout(policy, [a.url])
        ro.algorithm.group_size = 1
        try:
            playing = asyncio.ensure_future(rollout_groups(ro, [task("t1")], 1))
            while not a.started:  # the sandbox is setting the task up
                assert not playing.done(), playing.result()
                await asyncio.sleep(0.05)
            playing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await playing
            assert a.released == 1
            assert a.episode is None
            assert engine.generations == []  # it never played
        finally:
            await engine.close()


async def test_a_cancelled_episode_hands_its_sandbox_back_before_it_ends(policy) -> None:
    """A stop cancels the episodes in flight, and the loop cancels them once more on its way out
    (train.py: the stop's own cancel, then the in-flight tasks'). Each must still have released
    its sandbox when its cancellation is over: a release left pending is cancelled with the
    event loop, and the sandbox stays leased until its idle timeout."""
    with LoopbackSandbox({"slow_release"}) as a:
        ro, engine = make_rollout(policy, [a.url])
        ro.algorithm.group_size = 1
        ro.algorithm.max_turns = 50  # long enough to be cancelled mid-episode
        try:
            playing = asyncio.ensure_future(rollout_groups(ro, [task("t1", expected=10**6)], 1))
            while not engine.generations:  # the episode has started and the model is playing
                assert not playing.done(), playing.result()
                await asyncio.sleep(0.05)
            playing.cancel()
            await asyncio.to_thread(a.releasing.wait, 30)  # the release is in flight
            playing.cancel()  # the second cancellation
            with pytest.raises(asyncio.CancelledError):
                await playing
            assert a.released == 1
            assert a.episode is None
        finally:
            await engine.close()


async def test_a_release_the_sandbox_answers_404_leaves_it_usable(policy) -> None:
    """404 to a release: the sandbox holds no such episode (its watchdog reset it, or a DELETE
    overtook the POST we gave up on). Nothing is left to reset, so it does not cool off; any
    other failed release does."""
    leases = SandboxLeases(cooloff_seconds=60)

    async def release_and_count_cooling(url: str, episode_id: str) -> int:
        client = SandboxClient(url, TOKEN, timeout=10)
        try:
            async with leases.lease() as lease:
                await _release(client, lease, episode_id)
        finally:
            await client.aclose()
        return leases.counts()["cooling"]

    with LoopbackSandbox() as a:
        leases.set_ready([a.url])
        assert await release_and_count_cooling(a.url, "ep-gone-0000") == 0
    # the sandbox is gone now: unreachable, so its release fails and it cools off
    assert await release_and_count_cooling(a.url, "ep-gone-0001") == 1


async def test_busy_sandbox_is_waited_for_not_evicted(policy) -> None:
    with LoopbackSandbox() as a:
        ro, engine = make_rollout(policy, [a.url])
        ro.algorithm.group_size = 3  # three episodes, one sandbox: they take turns
        try:
            groups = await asyncio.wait_for(rollout_groups(ro, [task("t1")], step=1), 120)
        finally:
            await engine.close()
    assert a.started == 3
    assert a.released == 3
    assert all(not e.excluded for e in groups[0].episodes)
    assert torch.is_tensor(groups[0].episodes[0].samples[0].input_ids)
