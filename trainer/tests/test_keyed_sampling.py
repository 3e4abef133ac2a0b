"""Keyed draws (engines/embedded/keyed.py, SamplingParams.seed): a seeded request samples from
its seed and token index alone, so it gets the same tokens whatever shares its batch, and the
draws still follow softmax(logits / T) under the banned ids and top-p."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.embedded import keyed
from kubecua_trainer.engines.embedded.sampling import sample_rows
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tokens import Conversation


def test_the_tensor_mix_is_splitmix64() -> None:
    # column 0 of a row is SplitMix64's finaliser of the row's key; the first output of
    # SplitMix64 seeded 0 is 0xE220A8397B1DCDAF
    assert keyed.mix(0) == 0xE220A8397B1DCDAF
    keys = [keyed.key_of(s, i) for s in (0, 1, 2**40) for i in (0, 1, 15)]
    u = keyed.uniforms(keys, 4)
    expected = [((keyed.mix(k) >> 11) + 0.5) * 2.0**-53 for k in keys]
    assert u[:, 0].tolist() == expected
    assert u.min() > 0
    assert u.max() < 1
    assert len({round(x, 12) for x in u.flatten().tolist()}) == u.numel()  # no repeats


def test_keyed_draws_follow_the_softmax_and_skip_banned_ids() -> None:
    n = 40_000
    logits = torch.tensor([[2.0, 0.0, 0.0, 1.0, 5.0]]).repeat(n, 1)
    keys: list[int | None] = [keyed.key_of(7, i) for i in range(n)]
    ids, lps = sample_rows(logits, [1.0] * n, [1.0] * n, [4], keys=keys)
    freq = torch.bincount(torch.tensor(ids), minlength=5).double() / n
    want = torch.softmax(torch.tensor([2.0, 0.0, 0.0, 1.0, float("-inf")]), -1).double()
    assert freq[4] == 0  # banned
    # binomial standard error at n = 40,000 is at most 0.0025: 4 of them
    assert (freq - want).abs().max() < 0.01, (freq, want)
    # the behaviour log-prob is the banned-masked log-softmax's
    assert lps[ids.index(0)] == pytest.approx(math.log(want[0].item()), abs=1e-6)
    # at T = 0.5 the draws sharpen as softmax(logits / 0.5)
    ids, _ = sample_rows(logits, [0.5] * n, [1.0] * n, [4], keys=keys)
    freq = torch.bincount(torch.tensor(ids), minlength=5).double() / n
    want = torch.softmax(torch.tensor([4.0, 0.0, 0.0, 2.0, float("-inf")]), -1).double()
    assert (freq - want).abs().max() < 0.01, (freq, want)


def test_a_keyed_row_draws_the_same_id_whatever_shares_its_batch() -> None:
    torch.manual_seed(0)
    row = torch.randn(1, 50)
    key = keyed.key_of(123, 4)
    alone, alone_lp = sample_rows(row, [1.0], [1.0], [], keys=[key])
    for size in (2, 5, 9):
        others = torch.randn(size, 50)
        batch = torch.cat([others[:2], row, others[2:]])
        temps = [1.0, 0.0, *([1.0] * size)][: size + 1]
        keys: list[int | None] = [None, None, key, *[keyed.key_of(9, j) for j in range(size)]]
        ids, lps = sample_rows(batch, temps, [1.0] * (size + 1), [], keys=keys[: size + 1])
        assert ids[2] == alone[0]
        assert lps[2] == pytest.approx(alone_lp[0], abs=1e-6)
    # the rows of one seed differ by token index; keyed rows leave the generator untouched
    gen = torch.Generator().manual_seed(5)
    state = gen.get_state()
    rows = torch.zeros(64, 50)
    keys = [keyed.key_of(1, i) for i in range(64)]
    ids, _ = sample_rows(rows, [1.0] * 64, [1.0] * 64, [], gen, keys)
    assert len(set(ids)) > 20
    assert torch.equal(gen.get_state(), state)


def test_keyed_draws_keep_to_top_p() -> None:
    # probabilities 0.64, 0.24, 0.09, 0.03 (logits 3, 2, 1, 0 at T = 1 ~): top-p 0.7 keeps the
    # first two only
    n = 5_000
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]]).repeat(n, 1)
    keys: list[int | None] = [keyed.key_of(3, i) for i in range(n)]
    ids, _ = sample_rows(logits, [1.0] * n, [0.7] * n, [], keys=keys)
    assert set(ids) == {0, 1}


@pytest.fixture(scope="module")
def policy(tiny_model_dir: Path) -> Policy:
    return load_policy(str(tiny_model_dir), dtype="float32", device="cpu")


def _prompt(policy: Policy, k: int) -> tuple[list[int], list[Image.Image]]:
    conv = Conversation(policy, "sys", 56 * 56 * 4)
    conv.add_user(f"task {k}", screenshot(k, (150, 120)))
    return conv.prompt()


def test_a_seeded_request_gets_the_same_tokens_alone_and_batched(policy: Policy) -> None:
    im_end = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def sampling(seed: int | None) -> SamplingParams:
        return SamplingParams(1.0, 1.0, 12, (im_end,), seed=seed)

    async def run() -> tuple[list[Generation], list[Generation], list[Generation]]:
        engine = HFEngine(policy, seed=0)
        try:
            prompts = [_prompt(policy, k) for k in range(6)]
            alone = [await engine.generate(*p, sampling(100 + k)) for k, p in enumerate(prompts)]
            together = await asyncio.gather(
                *(engine.generate(*p, sampling(100 + k)) for k, p in enumerate(prompts)),
                *(engine.generate(*p, sampling(None)) for p in prompts),  # unseeded company
            )
            other = [await engine.generate(*p, sampling(200 + k)) for k, p in enumerate(prompts)]
            assert max(engine.batch_sizes) > 1  # they did share a batch
            return alone, list(together[:6]), other
        finally:
            await engine.close()

    alone, together, other = asyncio.run(run())
    assert [g.token_ids for g in alone] == [g.token_ids for g in together]
    for a, b in zip(alone, together, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    # another seed, other draws (12 tokens of 6 requests: equal only by a vanishing chance)
    assert [g.token_ids for g in other] != [g.token_ids for g in alone]
