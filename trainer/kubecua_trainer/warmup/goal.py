"""spec.warmup.goal: did the warm-up take? Measured after its last epoch, on its own demonstrations.

The measure is the share of demonstrated replies that the greedy policy reproduces exactly, given
the demonstration's screens and earlier turns: one forward pass over a demonstration's sample,
then for every reply token whether it is the policy's most likely token (the engine's banned ids
left out, as it samples). A reply whose every token is that one is the reply greedy decoding
would write, so no desktop and no generation is needed: one forward pass per demonstration
measured, where a check played on desktops (warmup/stopping.py) costs about 100 s.
goal.demonstrations of them are measured, drawn with spec.seed, always the same ones for a run.
Why this measure and the defaults: api/kubecua_api/warmup.py.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kubecua_api.warmup import WarmupGoalConfig
from kubecua_trainer.learning.logprobs import hidden_states
from kubecua_trainer.model import Policy
from kubecua_trainer.tokens import Sample

MET, MET_AFTER, CONTINUED, FAILED = (
    "Met",
    "MetAfterExtension",
    "BelowGoalContinued",
    "BelowGoalFailed",
)
CHUNK = 1024  # reply tokens through the LM head at once: (chunk, vocab) logits at a time


class WarmupBelowGoal(RuntimeError):
    """The warm-up ended below spec.warmup.goal and onBelowGoal says fail (after an extension,
    with extend): the run fails, its warm-up checkpointed."""


@dataclass
class GoalCheck:
    epochs: int
    matched: int  # replies reproduced exactly
    replies: int
    demonstrations: int
    goal: float
    seconds: float

    @property
    def reply_match(self) -> float:
        return self.matched / self.replies if self.replies else 0.0

    @property
    def met(self) -> bool:
        return self.replies > 0 and self.reply_match >= self.goal - 1e-12

    def line(self) -> str:
        """e.g. "warm-up goal after 90 epochs: the greedy policy reproduces 41 of 96 demonstrated
        replies (43%) of 32 demonstrations; goal 60%: below its goal (0.8 s)"."""
        verdict = "met" if self.met else "below its goal"
        return (
            f"warm-up goal after {self.epochs} epochs: the greedy policy reproduces {self.matched}"
            f" of {self.replies} demonstrated replies ({self.reply_match:.0%}) of"
            f" {self.demonstrations} demonstrations; goal {self.goal:.0%}: {verdict}"
            f" ({self.seconds:.1f} s)"
        )


def goal_indices(count: int, goal: WarmupGoalConfig, seed: int) -> list[int]:
    """The demonstrations measured: goal.demonstrations of `count`, drawn with the run's seed,
    in their file order (all of them when there are fewer).

    >>> goal_indices(3, WarmupGoalConfig(demonstrations=5), 0)
    [0, 1, 2]
    >>> len(goal_indices(50, WarmupGoalConfig(demonstrations=4), 0))
    4
    """
    if count <= goal.demonstrations:
        return list(range(count))
    return sorted(
        random.Random(f"kubecua-warmup-goal:{seed}").sample(range(count), goal.demonstrations)
    )


@torch.no_grad()
def replies_reproduced(policy: Policy, sample: Sample) -> tuple[int, int]:
    """(replies the greedy policy reproduces exactly, replies) of one sample; a reply is a run of
    consecutive mask-1 tokens (observations, mask 0, separate any two)."""
    positions = sample.loss_mask.nonzero()[:, 0]
    if len(positions) == 0:
        return 0, 0
    device = policy.device
    with policy.autocast():
        hidden = hidden_states(policy, sample)[positions.to(device) - 1]
    weight: torch.Tensor = policy.model.lm_head.weight  # type: ignore[union-attr,assignment]
    banned = policy.banned_ids
    guesses = []
    for start in range(0, len(positions), CHUNK):
        logits = (hidden[start : start + CHUNK] @ weight.T).float()
        logits[:, banned] = float("-inf")
        guesses.append(logits.argmax(-1).cpu())
    right = torch.cat(guesses) == sample.input_ids[positions]
    breaks = ((positions[1:] != positions[:-1] + 1).nonzero()[:, 0] + 1).tolist()
    runs = torch.tensor_split(right, breaks)
    return sum(bool(r.all()) for r in runs), len(runs)


def measure(
    policy: Policy,
    samples: Callable[[int], list[Sample]],
    indices: list[int],
    goal: WarmupGoalConfig,
    epochs: int,
) -> GoalCheck:
    """The goal's measurement of `policy` on the demonstrations at `indices` (samples(i): the
    i-th demonstration's samples). Blocking: run it in a thread."""
    t0 = time.monotonic()
    matched = replies = 0
    with policy.lock:
        policy.model.eval()
        for i in indices:
            for sample in samples(i):
                m, n = replies_reproduced(policy, sample)
                matched, replies = matched + m, replies + n
    seconds = time.monotonic() - t0
    return GoalCheck(epochs, matched, replies, len(indices), goal.reply_match_min, seconds)


def outcome(check: GoalCheck, goal: WarmupGoalConfig, extended: int) -> str:
    """What the run does with its (last) measurement: Met, MetAfterExtension, BelowGoalContinued
    or BelowGoalFailed (extend fails a warm-up still below after its one extension)."""
    if check.met:
        return MET_AFTER if extended else MET
    return CONTINUED if goal.on_below_goal == "continue" else FAILED


def record(check: GoalCheck, goal: WarmupGoalConfig, extended: int, result: str) -> dict[str, Any]:
    """warmup.json's "goal": what the report, the status and the metrics show."""
    return {
        "reply_match": round(check.reply_match, 6),
        "matched": check.matched,
        "replies": check.replies,
        "demonstrations": check.demonstrations,
        "reply_match_min": goal.reply_match_min,
        "on_below_goal": goal.on_below_goal,
        "epochs": check.epochs,
        "extended_epochs": extended,
        "below_goal": not check.met,
        "result": result,
        "seconds": round(check.seconds, 3),
    }


def failure_message(goal: dict[str, Any]) -> str:
    """The error a run that fails on its goal prints (its record: record())."""
    if goal["extended_epochs"]:
        how = f"after its extension by {goal['extended_epochs']} epochs (onBelowGoal extend)"
    else:
        how = "(spec.warmup.goal.onBelowGoal fail)"
    return (
        f"the warm-up ended below its goal {how}: the greedy policy reproduces"
        f" {goal['matched']} of {goal['replies']} demonstrated replies"
        f" ({goal['reply_match']:.0%}, goal spec.warmup.goal.replyMatchMin"
        f" {goal['reply_match_min']:.0%}) after {goal['epochs']} epochs, so GRPO would start from"
        " a policy that has not learnt its demonstrations. The step-0 checkpoint keeps the"
        " warm-up; try another spec.seed (--seed), more spec.warmup.epochs or another"
        " learningRate, or set onBelowGoal: continue to train anyway"
    )
