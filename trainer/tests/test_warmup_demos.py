"""Demonstrations -> samples: the warm-up trains exactly the tokens an episode of the rollout
would have trained (token for token against an episode the trainer played and wrote), with the
loss mask on the replies and their <|im_end|> only, in both training modes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from loopback_sandbox import TOKEN, LoopbackSandbox, task

from kubecua_trainer.config import AlgorithmConfig, RolloutConfig
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.model import Policy
from kubecua_trainer.rollout.agent import ParseError, parse_action
from kubecua_trainer.rollout.episode import Rollout, play_episode
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.tokens import Sample
from kubecua_trainer.trajectories import read_trajectories, write_trajectories
from kubecua_trainer.warmup.demos import demo_samples, rescale_reply

CLICK = "I click the button.\n```python\npyautogui.click(10, 20)\n```"
REPLIES = [CLICK, "I am not sure what to do.", "DONE"]  # an action, an invalid reply, DONE
ROLLOUT = RolloutConfig(max_pixels=112 * 84, keep_screenshots=1, episode_timeout_seconds=60)


class ScriptedEngine:
    """Replies with fixed texts as the tokenizer encodes them. A stand-in for the hf engine on
    purpose: a random tiny model samples ids that need not be the tokenizer's own encoding of
    their text, and a trajectory keeps the text, so only canonical ids can match exactly."""

    def __init__(self, policy: Policy, replies: list[str]) -> None:
        self.policy, self.replies = policy, list(replies)
        self.im_end = int(policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    async def generate(self, prompt_ids, images, sampling: SamplingParams) -> Generation:
        text = self.replies.pop(0)
        ids = [*self.policy.tokenizer(text, add_special_tokens=False)["input_ids"], self.im_end]
        return Generation(ids, [-0.5] * len(ids), "stop")

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None: ...

    async def close(self) -> None: ...


async def play_scripted(policy: Policy, mode: str) -> EpisodeResult:
    with LoopbackSandbox() as sandbox:
        leases = SandboxLeases()
        leases.set_ready([sandbox.url])
        algorithm = AlgorithmConfig(max_turns=3, max_new_tokens=64, mode=mode, turn_discount=0.5)
        ro = Rollout(policy, ScriptedEngine(policy, REPLIES), leases, TOKEN, algorithm, ROLLOUT)
        ep = await play_episode(ro, task("t1", func="clicked", expected=1), "g0", "s0001-g00-e00")
    assert ep.outcome == "success", ep.detail
    assert [t.screenshot is not None for t in ep.turns] == [
        True,
        True,
        False,
    ]  # DONE answers feedback
    return ep


def same(a: Sample, b: Sample) -> None:
    assert a.input_ids.tolist() == b.input_ids.tolist()
    assert a.loss_mask.tolist() == b.loss_mask.tolist()
    assert a.image_grid_thw is not None
    assert b.image_grid_thw is not None
    assert a.image_grid_thw.tolist() == b.image_grid_thw.tolist()
    assert a.pixel_values is not None
    assert b.pixel_values is not None
    assert torch.equal(a.pixel_values, b.pixel_values)
    assert a.reward == b.reward


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["trajectory", "perTurn"])
async def test_demo_from_a_written_episode_equals_the_rollouts_sample(
    policy: Policy, tmp_path: Path, mode: str
) -> None:
    ep = await play_scripted(policy, mode)
    write_trajectories(tmp_path / "episodes.jsonl", [ep], step=1)
    (demo,) = read_trajectories(tmp_path / "episodes.jsonl")
    algorithm = AlgorithmConfig(max_turns=3, mode=mode, turn_discount=0.5)
    built = demo_samples(policy, demo, algorithm, ROLLOUT)
    assert len(built) == len(ep.samples) == (1 if mode == "trajectory" else 3)
    for mine, played in zip(built, ep.samples, strict=True):
        same(mine, played)


@pytest.mark.asyncio
async def test_loss_mask_is_exactly_each_reply_and_its_im_end(policy: Policy, tmp_path) -> None:
    ep = await play_scripted(policy, "trajectory")
    write_trajectories(tmp_path / "episodes.jsonl", [ep])
    (demo,) = read_trajectories(tmp_path / "episodes.jsonl")
    (sample,) = demo_samples(policy, demo, AlgorithmConfig(max_turns=3), ROLLOUT)
    tok = policy.tokenizer
    im_end = int(tok.convert_tokens_to_ids("<|im_end|>"))
    ids, mask = sample.input_ids.tolist(), sample.loss_mask.tolist()
    # Expected spans: each reply's ids + <|im_end|>, right after an assistant header.
    header = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    starts = [i + len(header) for i in range(len(ids)) if ids[i : i + len(header)] == header]
    expected = [False] * len(ids)
    for start, reply in zip(starts, REPLIES, strict=True):
        span = [*tok(reply, add_special_tokens=False)["input_ids"], im_end]
        assert ids[start : start + len(span)] == span
        expected[start : start + len(span)] = [True] * len(span)
    assert mask == expected
    masked = [i for i, m in zip(ids, mask, strict=True) if m]
    assert tok.decode(masked) == "<|im_end|>".join(REPLIES) + "<|im_end|>"
    assert sum(mask) == sum(len(tok(r)["input_ids"]) + 1 for r in REPLIES)


@pytest.mark.asyncio
async def test_coordinates_follow_the_runs_image_size(policy: Policy, tmp_path: Path) -> None:
    """A demonstration whose model saw 112x84, trained at maxPixels 56*56 (a smaller image),
    gets its click scaled by the ratio of the two image sizes."""
    ep = await play_scripted(policy, "trajectory")
    write_trajectories(tmp_path / "episodes.jsonl", [ep])
    (demo,) = read_trajectories(tmp_path / "episodes.jsonl")
    small = RolloutConfig(max_pixels=56 * 56)
    (sample,) = demo_samples(policy, demo, AlgorithmConfig(max_turns=3), small)
    assert sample.image_grid_thw is not None
    _, h, w = sample.image_grid_thw[0].tolist()
    patch = int(policy.processor.image_processor.patch_size)
    sx, sy = w * patch / 112, h * patch / 84
    text = policy.tokenizer.decode(sample.input_ids[sample.loss_mask].tolist())
    assert f"pyautogui.click({round(10 * sx)}, {round(20 * sy)})" in text
    assert (sx, sy) != (1.0, 1.0)


def test_rescale_reply_scales_the_action_and_keeps_the_rest() -> None:
    reply = "Save first.\n```python\npyautogui.click(100, 50)\npyautogui.write('a')\n```"
    out = rescale_reply(reply, 0.5, 2.0)
    assert out == "Save first.\n```python\npyautogui.click(50, 100)\npyautogui.write('a')\n```"
    assert parse_action(out).code.startswith("pyautogui.click(50, 100)")
    assert rescale_reply("DONE", 0.5, 0.5) == "DONE"
    assert rescale_reply("no action here", 2.0, 2.0) == "no action here"
    with pytest.raises(ParseError):
        parse_action(rescale_reply("no action here", 2.0, 2.0))
