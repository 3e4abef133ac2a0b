"""Demonstrations (trajectories.py format) -> the exact samples an episode of the rollout makes.

A demonstration is replayed through the rollout's own context (rollout/context.py, picked by
algorithm.mode): the system prompt at the size of the model's first image, `Task: ...` and the
screenshot, each reply's ids + <|im_end|> (mask 1), then `Turn N. ...` and the next screenshot,
or the feedback text where the agent got feedback instead of a screenshot. Screenshots are fitted
to this run's rollout.maxPixels exactly as the rollout fits the desktop's image, and coordinates
in the replies are rescaled from the image the demonstration's model saw (image_size) to this
run's image. So a demonstration built from an episode the trainer wrote equals, id for id, the
sample the rollout built for it (tests/test_warmup_demos.py), as long as the sampled ids were the
tokenizer's own encoding of the reply text: the format keeps text, not ids.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from kubecua_trainer.config import ConfigError
from kubecua_trainer.engines.base import Generation
from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    next_user_text,
    parse_action,
    scale_coordinates,
    system_prompt,
)
from kubecua_trainer.rollout.context import CONTEXTS
from kubecua_trainer.tokens import Sample, fit_image
from kubecua_trainer.trajectories import Trajectory, read_trajectories

if TYPE_CHECKING:
    from PIL import Image

    from kubecua_trainer.config import AlgorithmConfig, RolloutConfig, TrainingRunSpec
    from kubecua_trainer.model import Policy

FIELD = "spec.warmup.demonstrations"
# Fitted screenshots, kept across the warm-up's epochs: decoding a screen's PNG and fitting it
# was most of building a demonstration's samples (0.8 s of 0.8-1.0 s for four 1920x1080 screens
# on the busy 2-core machine, 2026-11-28), and every epoch built them again. Bounded in bytes, so
# a large set at a large maxPixels decodes again rather than holding every screen (sft.py keeps
# no samples for the same reason).
FITTED_CACHE_BYTES = 256 << 20
_fitted_cache: OrderedDict[tuple[int, str, int], Image.Image] = OrderedDict()
_fitted_bytes = 0


def load_demonstrations(spec: TrainingRunSpec, held_out: set[str]) -> list[Trajectory]:
    """The demonstrations the warm-up trains on; ConfigError (naming the field) for a missing
    path, an unreadable line or screenshot, an empty set, or a held-out (evaluation) task."""
    assert spec.warmup is not None
    path = spec.warmup.demonstrations
    try:
        demos = list(read_trajectories(path))
    except (OSError, ValueError) as err:  # FileNotFoundError, bad JSON, not a trajectory line
        raise ConfigError(f"{FIELD}: {err}") from None
    read = len(demos)
    if spec.warmup.successes_only:
        demos = [d for d in demos if d.succeeded]
    if not demos:
        kept = " successful" if spec.warmup.successes_only else ""
        raise ConfigError(f"{FIELD}: no{kept} demonstrations in {path} ({read} lines read)")
    for d in demos:
        if not d.turns or d.turns[0].screenshot is None:
            raise ConfigError(f"{FIELD}: {d.record.get('key')} ({d.task_id}) has no first screen")
        missing = [t.screenshot for t in d.turns if t.screenshot and not t.screenshot.exists()]
        if missing:
            raise ConfigError(f"{FIELD}: {d.task_id}: screenshot {missing[0]} does not exist")
    trained_on = sorted({d.task_id for d in demos} & held_out)
    if trained_on:
        raise ConfigError(
            f"{FIELD}: demonstrations of held-out tasks {trained_on} (spec.evaluation.tasks):"
            " held-out tasks are never trained on, warm-up included"
        )
    return demos


def demo_samples(
    policy: Policy, demo: Trajectory, algorithm: AlgorithmConfig, rollout: RolloutConfig
) -> list[Sample]:
    """The samples the rollout would have built for this episode (one in trajectory mode, one a
    turn in perTurn mode); mask 1 on each reply's ids and its <|im_end|>, 0 elsewhere."""
    images = [_fitted(policy, demo, i, rollout.max_pixels) for i in range(len(demo.turns))]
    first = images[0]
    if first is None:
        raise ValueError(f"{demo.task_id}: the first turn has no screenshot")
    sx, sy = coordinate_scale(demo.image_size, first.size)
    ctx = CONTEXTS[algorithm.mode](
        policy,
        system_prompt(*first.size, rollout.system_prompt),
        rollout.max_pixels,
        keep_screenshots=rollout.keep_screenshots,
        turn_discount=algorithm.turn_discount,
    )
    im_end = int(policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    for i, turn in enumerate(demo.turns):
        ctx.add_user(user_text(demo, i, images[i] is not None), images[i])
        ctx.prompt()  # perTurn builds the turn's prompt here, as before a generation
        reply = rescale_reply(turn.reply, sx, sy)
        ids = [*policy.tokenizer(reply, add_special_tokens=False)["input_ids"], im_end]
        ctx.add_generation(Generation(ids, [0.0] * len(ids), "stop"), reply)
    samples = ctx.samples(demo.reward or 0.0)
    for s in samples:
        s.task_id, s.group_id = demo.task_id, str(demo.record.get("key", ""))
    return samples


def user_text(demo: Trajectory, i: int, has_screen: bool) -> str:
    """Turn i's user text as rollout/episode.py writes it: the task, `Turn i+1. ...` before a
    new screenshot, or the feedback on the previous reply when there was no screenshot."""
    if i == 0:
        return first_user_text(demo.instruction)
    if has_screen:
        return next_user_text(i + 1)
    return demo.turns[i - 1].feedback or ""


def coordinate_scale(seen: tuple[int, int] | None, now: tuple[int, int]) -> tuple[float, float]:
    """Factors from the demonstration's model image to this run's: (1, 1) when they agree.

    >>> coordinate_scale((1316, 728), (280, 168))   # maxPixels 1003520 -> 50176, 1920x1080 screen
    (0.2127659574468085, 0.23076923076923078)
    """
    if seen is None:
        return 1.0, 1.0
    return now[0] / seen[0], now[1] / seen[1]


def rescale_reply(reply: str, sx: float, sy: float) -> str:
    """The reply with its action's coordinates scaled; other text, and invalid replies, as is.

    >>> rescale_reply("Open it.\\n```python\\npyautogui.click(100, 50)\\n```", 0.5, 2.0)
    'Open it.\\n```python\\npyautogui.click(50, 100)\\n```'
    """
    if sx == 1.0 and sy == 1.0:
        return reply
    try:
        action = parse_action(reply)
    except ParseError:
        return reply
    if action.kind != "code":
        return reply
    return reply.replace(action.code, scale_coordinates(action.code, sx, sy), 1)


def _fitted(policy: Policy, demo: Trajectory, turn: int, max_pixels: int) -> Image.Image | None:
    global _fitted_bytes
    shot = demo.turns[turn].screenshot
    key = (id(policy), str(shot), max_pixels)
    if shot is not None and key in _fitted_cache:
        _fitted_cache.move_to_end(key)
        return _fitted_cache[key]
    image = demo.image(turn)
    if image is None:
        return None
    fitted = fit_image(image, policy, max_pixels)
    size = fitted.width * fitted.height * len(fitted.getbands())
    if shot is not None and size <= FITTED_CACHE_BYTES:
        _fitted_cache[key] = fitted
        _fitted_bytes += size
        while _fitted_bytes > FITTED_CACHE_BYTES:
            _, old = _fitted_cache.popitem(last=False)
            _fitted_bytes -= old.width * old.height * len(old.getbands())
    return fitted
