"""The embedded engine's continuous batching and KV reuse (engines/embedded/): mid-batch
arrivals join without waiting, and reusing the KV of earlier turns gives the same ids and
behaviour log-probs as recomputing every prompt, greedy and seeded, also when a screenshot is
dropped or changed, and never across a weight change. Every test runs on the CPU, and on CUDA in
fp32 where there is a GPU (the GPU machine runs this file alone: `pytest --noconftest`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.embedded.sequence import EngineRecord
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tiny_models import build_tiny_model
from kubecua_trainer.tokens import Conversation, build_turn_prompt

MAX_PIXELS = 56 * 56 * 4
TURNS = 3
# The CPU cases of the same checks run in make test; these ran on an H100 (docs/benchmarks.md).
GPU = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (the CPU variants of these checks run)"
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Own copy of conftest's fixture, so that the file runs alone with `pytest --noconftest`."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-engine"), "qwen2_5_vl")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=GPU)])
def policy(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Policy:
    """A fresh tiny Qwen2.5-VL in fp32, on the CPU and on CUDA."""
    return load_policy(str(tiny_model_dir), dtype="float32", device=request.param)


def _sampling(policy: Policy, **kw: object) -> SamplingParams:
    im_end = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return SamplingParams(**{"max_new_tokens": 8, "stop_token_ids": (im_end,), **kw})  # type: ignore[arg-type]


def _conversation(policy: Policy, first: int = 0) -> Conversation:
    conv = Conversation(policy, "sys", MAX_PIXELS)
    conv.add_user("task", screenshot(first, (150, 120)))
    return conv


async def _trajectory(engine: HFEngine, policy: Policy, sampling: SamplingParams) -> Conversation:
    """TURNS turns of one episode, each prompt extending the last (trajectory mode)."""
    conv = _conversation(policy)
    for turn in range(TURNS):
        if turn:
            conv.add_user(f"turn {turn}", screenshot(turn, (150, 120)))
        conv.add_generation(await engine.generate(*conv.prompt(), sampling))
    return conv


def _generated(conv: Conversation) -> tuple[list[int], torch.Tensor]:
    sample = conv.to_sample()
    return sample.input_ids[sample.loss_mask].tolist(), sample.behaviour_logprobs[sample.loss_mask]


def test_request_arriving_mid_batch_joins_at_the_next_step(policy: Policy) -> None:
    long = SamplingParams(max_new_tokens=200)  # no stop ids: runs all 200 steps
    greedy = _sampling(policy, temperature=0.0, max_new_tokens=4, stop_token_ids=())

    async def run() -> tuple[list[Generation], Generation]:
        engine = HFEngine(policy)
        assert engine.scheduler is not None
        first = asyncio.create_task(engine.generate(*_conversation(policy).prompt(), long))
        # The condition lives in the engine's thread: poll it until the first request decodes.
        while engine.scheduler.steps < 3:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        second = await engine.generate(*_conversation(policy, 5).prompt(), greedy)
        assert not first.done()  # served while the first is still decoding
        both = [await first, second]
        alone = await engine.generate(*_conversation(policy, 5).prompt(), greedy)
        await engine.close()
        a, b, c = engine.records
        assert (a.join_step, a.finish_step, a.new_tokens) == (0, 199, 200)
        assert 3 <= b.join_step < a.finish_step  # joined the running batch, did not wait
        assert b.running_at_join == 1
        assert b.finish_step == b.join_step + 3  # 4 ids: one from its prefill, 3 decode steps
        assert c.running_at_join == 0
        assert c.join_step >= a.finish_step
        return both, alone

    (long_gen, together), alone = asyncio.run(run())
    assert (len(long_gen.token_ids), long_gen.finish_reason) == (200, "length")
    # A greedy row decoded beside another (padding, a different temperature) equals it alone.
    assert together.token_ids == alone.token_ids
    assert torch.allclose(torch.tensor(together.logprobs), torch.tensor(alone.logprobs), atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_kv_reuse_equals_full_recompute(policy: Policy, temperature: float) -> None:
    """3 turns with a screenshot each: greedy, and sampling from one seed (top-p 0.9)."""
    sampling = _sampling(policy, temperature=temperature, top_p=0.9 if temperature else 1.0)

    async def run(**kw: Any) -> tuple[Conversation, list[EngineRecord]]:
        engine = HFEngine(policy, seed=7, **kw)
        conv = await _trajectory(engine, policy, sampling)
        await engine.close()
        return conv, list(engine.records)

    reused, records = asyncio.run(run())
    full, full_records = asyncio.run(run(cache_sequences=0))
    ids, logprobs = _generated(reused)
    full_ids, full_logprobs = _generated(full)
    assert ids == full_ids
    assert torch.allclose(logprobs, full_logprobs, atol=1e-5), (
        (logprobs - full_logprobs).abs().max()
    )
    # Turn k reuses the whole earlier context (all but the last sampled id, which was never fed
    # back) and encodes only its own screenshot; the recompute prefills and encodes everything.
    for turn, (r, f) in enumerate(zip(records, full_records, strict=True)):
        assert r.prompt_tokens == f.prompt_tokens == f.prefilled_tokens
        assert (f.reused_tokens, f.images_encoded) == (0, turn + 1)
        assert r.images_encoded == 1
        if turn:
            before = records[turn - 1]
            assert r.reused_tokens == before.prompt_tokens + before.new_tokens - 1
            assert r.prefilled_tokens == r.prompt_tokens - r.reused_tokens
    if temperature == 0.0:  # the static generate() path agrees token for token
        static, _ = asyncio.run(run(continuous=False))
        assert _generated(static)[0] == ids
    else:  # and the learner recomputes the behaviour log-probs from the sampled ids
        sample = reused.to_sample()
        with torch.no_grad():
            logp, _ = token_logprobs(policy, sample, temperature=temperature)
        logp, logprobs = logp.cpu(), logprobs.cpu()
        assert torch.allclose(logp, logprobs, atol=1e-4), (logp - logprobs).abs().max()


def test_dropped_screenshot_reuses_only_the_common_prefix(policy: Policy) -> None:
    """perTurn prompts keeping 1 screenshot: turn 2 drops turn 1's screenshot, so the stored KV
    is valid only up to where that screenshot was; the rest is prefilled anew."""
    sampling = _sampling(policy, temperature=0.0)

    async def run(**kw: Any) -> tuple[list[Generation], list[EngineRecord]]:
        engine = HFEngine(policy, **kw)
        history: list[Any] = []
        gens = []
        for turn in range(TURNS):
            history.append((f"turn {turn}", screenshot(turn, (150, 120)), None))
            conv = build_turn_prompt(policy, "sys", history, 1, MAX_PIXELS)
            gen = await engine.generate(*conv.prompt(), sampling)
            gens.append(gen)
            history[-1] = (history[-1][0], history[-1][1], f"reply {turn}")
        await engine.close()
        return gens, list(engine.records)

    gens, records = asyncio.run(run())
    full, _ = asyncio.run(run(cache_sequences=0))
    for g, f in zip(gens, full, strict=True):
        assert g.token_ids == f.token_ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, f.logprobs, strict=True)) < 1e-5
    for turn in (1, 2):
        r, before = records[turn], records[turn - 1]
        assert 0 < r.reused_tokens < before.prompt_tokens  # cut where the old screenshot was
        assert r.images_encoded == 1


def test_changed_screenshot_with_the_same_tokens_is_not_reused(policy: Policy) -> None:
    sampling = _sampling(policy, temperature=0.0, max_new_tokens=2)

    async def run() -> list[EngineRecord]:
        engine = HFEngine(policy)
        for first in (1, 2):  # same size, other pixels: identical token ids
            conv = _conversation(policy, first)
            conv.add_generation(await engine.generate(*conv.prompt(), sampling))
            conv.add_user("next", None)
            await engine.generate(*conv.prompt(), sampling)
        await engine.close()
        return list(engine.records)

    a1, a2, b1, b2 = asyncio.run(run())
    assert a2.reused_tokens > a1.prompt_tokens  # the same episode extends its own KV
    assert b1.reused_tokens < a1.prompt_tokens - 1  # the other screenshot is encoded again
    assert b1.images_encoded == 1
    assert b2.reused_tokens > b1.prompt_tokens


def test_kv_of_older_weights_is_never_reused(policy: Policy) -> None:
    sampling = _sampling(policy, temperature=0.0)

    async def run() -> tuple[list[EngineRecord], list[Generation]]:
        engine = HFEngine(policy)
        conv = _conversation(policy)
        first = await engine.generate(*conv.prompt(), sampling)
        conv.add_generation(first)
        conv.add_user("next", screenshot(3, (150, 120)))
        with policy.lock, torch.no_grad():  # what a learner step does: new weights, new version
            policy.model.lm_head.weight.mul_(1.5)  # type: ignore[union-attr, operator]
            policy.version = 1
        second = await engine.generate(*conv.prompt(), sampling)
        await engine.close()
        return list(engine.records), [first, second]

    (_, r2), (g1, g2) = asyncio.run(run())
    assert (r2.reused_tokens, r2.images_encoded) == (0, 2)
    assert (g1.policy_version, g2.policy_version) == (0, 1)
    assert r2.policy_version == 1


def test_weight_update_mid_generation_restarts_it_on_the_new_weights(policy: Policy) -> None:
    """A learner step while a request decodes: the learner gets policy.lock within a round, and
    the request starts again from its prompt, so one generation never mixes two weight versions."""
    long = SamplingParams(temperature=0.0, max_new_tokens=300)

    def learner_step() -> None:
        with policy.lock, torch.no_grad():
            policy.model.lm_head.weight.mul_(1.5)  # type: ignore[union-attr, operator]
            policy.version = 1

    async def run() -> tuple[Generation, Generation, list[EngineRecord]]:
        engine = HFEngine(policy, hold_seconds=0.02)  # rounds shorter than the generation
        assert engine.scheduler is not None
        prompt = _conversation(policy).prompt()
        first = asyncio.create_task(engine.generate(*prompt, long))
        while engine.scheduler.steps < 3:  # noqa: ASYNC110 (the engine's thread)
            await asyncio.sleep(0.002)
        await asyncio.wait_for(asyncio.to_thread(learner_step), 60)
        restarted = await first
        fresh = await engine.generate(*prompt, long)
        await engine.close()
        return restarted, fresh, list(engine.records)

    restarted, fresh, (rec, _) = asyncio.run(run())
    assert rec.restarts == 1
    assert (restarted.policy_version, fresh.policy_version) == (1, 1)
    assert restarted.token_ids == fresh.token_ids  # all of it from the new weights


def test_forget_cache_frees_the_stored_kv(policy: Policy) -> None:
    sampling = _sampling(policy, temperature=0.0, max_new_tokens=2)

    async def run() -> list[EngineRecord]:
        engine = HFEngine(policy)
        assert engine.scheduler is not None
        conv = _conversation(policy)
        conv.add_generation(await engine.generate(*conv.prompt(), sampling))
        assert engine.scheduler.store.bytes > 0
        # The worker frees it as soon as it is idle (its own thread); the call waits for that.
        assert await asyncio.to_thread(engine.forget_cache, 30.0)
        assert engine.scheduler.store.bytes == 0
        assert engine.scheduler.kv.k is None
        conv.add_user("next", None)
        await engine.generate(*conv.prompt(), sampling)
        await engine.close()
        return list(engine.records)

    _, second = asyncio.run(run())
    assert (second.reused_tokens, second.images_encoded) == (0, 1)


@GPU
@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_cuda_graph_decoding_equals_eager_decoding(tiny_model_dir: Path, dtype: str) -> None:
    """HFEngine(cuda_graphs=True) replays the decode step: in fp32 the same ids and log-probs as
    eager decoding; under bf16 autocast (the bf16 weight copy) the learner still agrees."""
    policy = load_policy(str(tiny_model_dir), dtype=dtype, device="cuda")
    sampling = _sampling(policy, temperature=0.0 if dtype == "float32" else 1.0)
    conv = _played_from_graphs(policy, sampling)
    ids, logprobs = _generated(conv)
    if dtype == "float32":
        engine = HFEngine(policy, seed=3, cuda_graphs=False)
        eager_ids, eager_logprobs = _generated(asyncio.run(_closed_after(engine, policy, sampling)))
        assert ids == eager_ids
        assert torch.allclose(logprobs, eager_logprobs, atol=1e-5)
    else:
        _assert_the_learner_agrees(policy, conv, logprobs)


async def _closed_after(engine: HFEngine, policy: Policy, sampling: SamplingParams) -> Conversation:
    conv = await _trajectory(engine, policy, sampling)
    await engine.close()
    return conv


def _played_from_graphs(policy: Policy, sampling: SamplingParams) -> Conversation:
    """One trajectory decoded from CUDA graphs, which were captured and never gave up."""
    engine = HFEngine(policy, seed=3, cuda_graphs=True)
    conv = asyncio.run(_closed_after(engine, policy, sampling))
    assert engine.scheduler is not None
    graphs = engine.scheduler.runner.graphs
    assert graphs is not None
    assert graphs.captures > 0
    assert not graphs.broken
    return conv


def _assert_the_learner_agrees(policy: Policy, conv: Conversation, logprobs: torch.Tensor) -> None:
    """Under bf16 autocast the learner's recomputation stays within 0.1 of the engine's."""
    with torch.no_grad(), policy.autocast():
        logp, _ = token_logprobs(policy, conv.to_sample(), temperature=1.0)
    assert (logp.float().cpu() - logprobs).abs().max() < 0.1


@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason="needs 2 CUDA devices (the engine's thread on another GPU than GPU 0): it runs on a "
    "2-GPU machine, CI has no GPU; the one-GPU case is "
    "test_cuda_graph_decoding_equals_eager_decoding",
)
def test_cuda_graphs_capture_on_the_policys_gpu_when_it_is_not_gpu_0(tiny_model_dir: Path) -> None:
    """A process under torchrun owns cuda:LOCAL_RANK, but the engine's worker thread started on
    GPU 0: its graphs captured on GPU 0's stream while the forward ran on cuda:1, and the capture
    failed (2 x H200, 2026-11-28; parallel/threads.py). The worker sets its device first."""
    policy = load_policy(str(tiny_model_dir), dtype="auto", device="cuda:1")
    conv = _played_from_graphs(policy, _sampling(policy, temperature=1.0))
    _assert_the_learner_agrees(policy, conv, _generated(conv)[1])


def test_screenshots_prepared_in_the_callers_thread_equal_the_processor_output(
    policy: Policy,
) -> None:
    """prepare() processes a request's newest screenshot before it is queued; the pixel values
    prefill then uses (prepared ones with the rest processed in the worker) are exactly what the
    processor gives for all the new screenshots at once, and the digests are the same."""
    from kubecua_trainer.engines.embedded.images import image_digest
    from kubecua_trainer.engines.embedded.sequence import Request

    engine = HFEngine(policy)
    try:
        b = engine.screenshots
        assert b is not None
        images = [screenshot(i, (150 + 14 * i, 120)) for i in range(3)]  # different grids
        req = Request([1], images, _sampling(policy), None, None)  # type: ignore[arg-type]
        b.prepare(req)
        assert sorted(req.prepared) == [2]  # only the newest one, before queueing
        assert req.digests == [image_digest(im) for im in images]
        pixels, grids = b.pixels(req, 1)
        whole = policy.processor.image_processor(images=images[1:], return_tensors="pt")
        assert pixels is not None
        assert grids is not None
        assert torch.equal(pixels, whole["pixel_values"])
        assert torch.equal(grids, whole["image_grid_thw"])
        assert b.pixels(req, 3) == (None, None)  # every screenshot reused: nothing to encode
    finally:
        asyncio.run(engine.close())


def test_requests_joining_together_share_one_prefill_with_unchanged_results(
    policy: Policy,
) -> None:
    """Four episodes whose turns reach the engine together: each turn's four prefills run as one
    padded forward (different reused prefixes, new lengths and screenshots per row), and give
    the ids and log-probs that the same requests give one at a time."""
    greedy = _sampling(policy, temperature=0.0)
    episodes = 4

    async def play(together: bool) -> tuple[list[Conversation], list[EngineRecord]]:
        engine = HFEngine(policy)
        convs = [Conversation(policy, "sys", MAX_PIXELS) for _ in range(episodes)]
        for i, conv in enumerate(convs):  # tasks of different lengths: different prefixes
            conv.add_user("task " * (1 + 2 * i), screenshot(i, (150, 120)))
        for turn in range(2):
            if turn:
                for i, conv in enumerate(convs):  # user turns of different lengths
                    conv.add_user("next " * (1 + 3 * i), screenshot(10 + i, (150, 120)))
            if together:  # queue all four while the worker waits for the lock it rounds under
                with policy.lock:
                    calls = [
                        asyncio.create_task(engine.generate(*c.prompt(), greedy)) for c in convs
                    ]
                    while engine._arrivals + engine._queue.qsize() < (turn + 1) * episodes:  # noqa: ASYNC110
                        await asyncio.sleep(0.002)
                gens = await asyncio.gather(*calls)
            else:
                gens = [await engine.generate(*c.prompt(), greedy) for c in convs]
            for conv, gen in zip(convs, gens, strict=True):
                conv.add_generation(gen)
        await engine.close()
        return convs, list(engine.records)

    batched, records = asyncio.run(play(True))
    alone, alone_records = asyncio.run(play(False))
    assert [r.prefill_batch for r in records] == [episodes] * 2 * episodes
    assert [r.prefill_batch for r in alone_records] == [1] * 2 * episodes
    second = records[episodes:]
    assert len({r.reused_tokens for r in second}) == episodes  # different prefixes per row
    assert len({r.prefilled_tokens for r in second}) == episodes  # and different new lengths

    def turn2(recs: list[EngineRecord]) -> list[tuple[int, int, int, int]]:
        # arrival order within a turn may differ; the prompt length names the episode
        return sorted(
            (r.prompt_tokens, r.reused_tokens, r.prefilled_tokens, r.images_encoded)
            for r in recs[episodes:]
        )

    # the second turn reuses each episode's own first turn, batched or not (the first turns
    # differ: alone, a later episode reuses the system prompt of an earlier one)
    assert turn2(records) == turn2(alone_records)
    for b, a in zip(batched, alone, strict=True):
        b_ids, b_lps = _generated(b)
        a_ids, a_lps = _generated(a)
        assert b_ids == a_ids
        assert torch.allclose(b_lps, a_lps, atol=1e-5), (b_lps - a_lps).abs().max()


def test_packed_prefill_equals_padded_prefill(policy: Policy) -> None:
    """Four episodes' turns joining together, prefilled packed in one row (variable-length
    attention) and right-padded to one length: the same ids, log-probs within 1e-5, each
    screenshot encoded once in both (issue 31 item 3). Greedy: the requests' arrival order (and
    so a seeded sampler's draws per row) may differ between the two runs."""
    sampling = _sampling(policy, temperature=0.0)
    episodes = 4

    async def play(packed: bool) -> tuple[list[Conversation], list[EngineRecord]]:
        engine = HFEngine(policy, packed_prefill=packed)
        convs = [Conversation(policy, "sys", MAX_PIXELS) for _ in range(episodes)]
        for i, conv in enumerate(convs):
            conv.add_user("task " * (1 + 2 * i), screenshot(i, (150, 120)))
        for turn in range(2):
            if turn:
                for i, conv in enumerate(convs):
                    conv.add_user("next " * (1 + 3 * i), screenshot(10 + i, (150, 120)))
            with policy.lock:  # all four queued before the worker's next round
                calls = [asyncio.create_task(engine.generate(*c.prompt(), sampling)) for c in convs]
                while engine._arrivals + engine._queue.qsize() < (turn + 1) * episodes:  # noqa: ASYNC110
                    await asyncio.sleep(0.002)
            for conv, gen in zip(convs, await asyncio.gather(*calls), strict=True):
                conv.add_generation(gen)
        await engine.close()
        return convs, list(engine.records)

    packed, packed_records = asyncio.run(play(True))
    padded, padded_records = asyncio.run(play(False))
    for records in (packed_records, padded_records):
        assert [r.prefill_batch for r in records] == [episodes] * 2 * episodes
        assert all(r.images_encoded == 1 for r in records)
        assert all(r.reused_tokens > 0 for r in records[episodes:])
    for a, b in zip(packed, padded, strict=True):
        a_ids, a_lps = _generated(a)
        b_ids, b_lps = _generated(b)
        assert a_ids == b_ids
        assert torch.allclose(a_lps, b_lps, atol=1e-5), (a_lps - b_lps).abs().max()


@GPU
def test_packed_prefill_in_bf16_agrees_with_the_learner(tiny_model_dir: Path) -> None:
    """Under bf16 autocast on CUDA the packed prefill runs varlen flash attention (GQA, each
    request bottom-right causal over its reused prefix): the behaviour log-probs of four
    episodes joining together agree with the learner's recomputation as the CUDA-graph test's."""
    policy = load_policy(str(tiny_model_dir), dtype="auto", device="cuda")
    sampling = _sampling(policy, temperature=1.0)

    async def play() -> tuple[list[Conversation], list[EngineRecord]]:
        engine = HFEngine(policy, seed=5, cuda_graphs=True)
        convs = [Conversation(policy, "sys", MAX_PIXELS) for _ in range(4)]
        for i, conv in enumerate(convs):
            conv.add_user("task " * (1 + 2 * i), screenshot(i, (150, 120)))
        for turn in range(2):
            if turn:
                for i, conv in enumerate(convs):
                    conv.add_user("next " * (1 + 3 * i), screenshot(10 + i, (150, 120)))
            with policy.lock:
                calls = [asyncio.create_task(engine.generate(*c.prompt(), sampling)) for c in convs]
                while engine._arrivals + engine._queue.qsize() < (turn + 1) * 4:  # noqa: ASYNC110
                    await asyncio.sleep(0.002)
            for conv, gen in zip(convs, await asyncio.gather(*calls), strict=True):
                conv.add_generation(gen)
        await engine.close()
        return convs, list(engine.records)

    convs, records = asyncio.run(play())
    assert [r.prefill_batch for r in records] == [4] * 8
    assert all(r.reused_tokens > 0 for r in records[4:])
    for conv in convs:
        sample = conv.to_sample()
        with torch.no_grad(), policy.autocast():
            logp, _ = token_logprobs(policy, sample, temperature=1.0)
        behaviour = sample.behaviour_logprobs[sample.loss_mask]
        assert (logp.float().cpu() - behaviour).abs().max() < 0.1
