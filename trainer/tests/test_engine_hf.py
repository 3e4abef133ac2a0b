"""The embedded hf engine: batching of concurrent requests, stop handling, bad input, and token
exactness (the learner scores exactly the sampled ids with the engine's log-probs)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import EngineError, SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy
from kubecua_trainer.tokens import Conversation

MAX_PIXELS = 56 * 56 * 4


def _sampling(policy: Policy, **kw: object) -> SamplingParams:
    im_end = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return SamplingParams(**{"max_new_tokens": 8, "stop_token_ids": (im_end,), **kw})  # type: ignore[arg-type]


def test_concurrent_requests_are_batched_and_cut_at_stop(policy: Policy) -> None:
    async def run() -> None:
        engine = HFEngine(policy)
        convs = []
        for i in range(6):
            conv = Conversation(policy, "sys", MAX_PIXELS)
            conv.add_user(f"task {i}", screenshot(i, (100 + 40 * i, 90)))
            convs.append(conv)
        sampling = _sampling(policy)
        gens = await asyncio.gather(*(engine.generate(*c.prompt(), sampling) for c in convs))
        await engine.close()
        assert max(engine.batch_sizes) > 1  # requests that arrive together share a forward
        assert sum(engine.batch_sizes) == 6
        assert engine.tokens_generated == sum(len(g.token_ids) for g in gens)
        assert engine.tokens_per_second() > 0
        for g in gens:
            assert len(g.token_ids) == len(g.logprobs)
            assert len(g.token_ids) <= 8
            assert all(lp <= 0 for lp in g.logprobs)
            stops = [t for t in g.token_ids if t in sampling.stop_token_ids]
            if g.finish_reason == "stop":
                assert stops == [g.token_ids[-1]]
            else:
                assert not stops
                assert len(g.token_ids) == 8
            assert not set(g.token_ids) & set(policy.banned_ids)

    asyncio.run(run())


def test_greedy_is_deterministic_across_batch_padding(policy: Policy) -> None:
    async def run() -> None:
        engine = HFEngine(policy)
        short = Conversation(policy, "sys", MAX_PIXELS)
        short.add_user("a", screenshot(1))
        long = Conversation(policy, "a much longer system prompt than the other", MAX_PIXELS)
        long.add_user("b b b b b b", screenshot(2, (200, 200)))
        greedy = _sampling(policy, temperature=0.0)
        alone = await engine.generate(*short.prompt(), greedy)
        together = await asyncio.gather(
            engine.generate(*short.prompt(), greedy), engine.generate(*long.prompt(), greedy)
        )
        await engine.close()
        assert together[0].token_ids == alone.token_ids

    asyncio.run(run())


def test_bad_request_fails_alone_and_engine_keeps_serving(policy: Policy) -> None:
    async def run() -> None:
        engine = HFEngine(policy)
        conv = Conversation(policy, "sys", MAX_PIXELS)
        conv.add_user("look", screenshot(3))
        ids, images = conv.prompt()
        with pytest.raises(EngineError, match="image pads"):
            await engine.generate(ids, [], _sampling(policy))  # pads without their image
        with pytest.raises(EngineError, match="empty prompt"):
            await engine.generate([], [], _sampling(policy))
        gen = await engine.generate(ids, images, _sampling(policy))
        await engine.close()
        assert gen.token_ids

    asyncio.run(run())


def test_tokens_trained_equal_tokens_sampled(policy: Policy) -> None:
    """Two turns sampled by the engine; the learner's view of the sample is exactly those ids, and
    its recomputed log-probs match the engine's behaviour log-probs."""

    async def run() -> tuple[Conversation, list[int]]:
        engine = HFEngine(policy)
        conv = Conversation(policy, "sys", MAX_PIXELS)
        sampled: list[int] = []
        for turn in range(2):
            conv.add_user(f"turn {turn}", screenshot(turn, (150, 120)))
            gen = await engine.generate(*conv.prompt(), _sampling(policy, temperature=0.8))
            sampled += gen.token_ids
            conv.add_generation(gen)
        await engine.close()
        return conv, sampled

    conv, sampled = asyncio.run(run())
    sample = conv.to_sample()
    assert sample.input_ids[sample.loss_mask].tolist() == sampled
    with torch.no_grad():
        logp, _ = token_logprobs(policy, sample, temperature=0.8)
    behaviour = sample.behaviour_logprobs[sample.loss_mask]
    assert torch.allclose(logp, behaviour, atol=1e-4), (logp - behaviour).abs().max()


def test_build_engine_picks_by_name_and_rejects_bad_config(policy: Policy) -> None:
    from kubecua_trainer.config import RolloutConfig
    from kubecua_trainer.engines import build_engine
    from kubecua_trainer.engines.sglang import SGLangEngine

    async def run() -> None:
        engine = build_engine(RolloutConfig(engine="hf", max_in_flight_episodes=4), policy)
        assert isinstance(engine, HFEngine)
        assert engine.max_batch_size == 4
        await engine.close()
        remote = build_engine(
            RolloutConfig(engine="sglang", sglang_urls=["http://127.0.0.1:30000"]), policy
        )
        assert isinstance(remote, SGLangEngine)
        assert remote.image_pad_id == policy.image_pad_id
        await remote.close()

    asyncio.run(run())
    with pytest.raises(ValueError, match="sglangUrls"):
        build_engine(RolloutConfig(engine="sglang"), policy)
