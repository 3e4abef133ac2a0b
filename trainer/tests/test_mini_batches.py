"""algorithm.miniBatches: a step's samples split in order into mini-batches, one AdamW step each,
the later ones' PPO ratio taken against the log-probs from before the step's first update.

Checked on the tiny model against the formula (loss.py's token_loss written out): the first
mini-batch is exactly a one-batch step of its samples; the second's loss uses the policy after
that update over the log-probs before it, so with a large enough update its clip acts, which
it never does with one mini-batch. The spec refuses more mini-batches than episodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from test_learner import make_sample

from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.learner import Learner, mini_batches
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tokens import Sample


def test_mini_batches_split_in_order_longer_first() -> None:
    assert mini_batches([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert mini_batches(list(range(32)), 4) == [list(range(i, i + 8)) for i in (0, 8, 16, 24)]
    assert mini_batches([0, 1], 5) == [[0], [1]]  # never an empty mini-batch beside full ones
    assert mini_batches([], 3) == [[]]
    assert mini_batches([7, 8, 9], 1) == [[7, 8, 9]]


def ppo_loss(policy: Policy, samples: list[Sample], old: list[torch.Tensor]) -> float:
    """token_loss by hand, token-mean over the samples (clips 0.2 / 0.28, cap 2)."""
    total, tokens = 0.0, sum(int(s.loss_mask.sum()) for s in samples)
    for s, o in zip(samples, old, strict=True):
        with torch.no_grad():
            logp, _ = token_logprobs(policy, s)
        r = torch.exp(logp - o)
        w = torch.clamp(torch.exp(o - s.behaviour_logprobs[s.loss_mask]), max=2.0)
        surrogate = torch.minimum(r * s.advantage, torch.clamp(r, 0.8, 1.28) * s.advantage)
        total += float(-(w * surrogate).sum())
    return total / tokens


def four(policy: Policy) -> list[Sample]:
    return [
        make_sample(policy, 1, 1.0, 3),
        make_sample(policy, 2, -1.0, 5),
        make_sample(policy, 3, 1.0, 4),
        make_sample(policy, 4, -1.0, 6),
    ]


def test_second_mini_batch_is_measured_against_the_weights_before_the_first_update(
    tiny_model_dir: Path,
) -> None:
    lr = 5e-2  # large: the first update moves the second mini-batch's ratio out of the clip
    policy = load_policy(str(tiny_model_dir), device="cpu")
    samples = four(policy)
    with torch.no_grad():
        before = [token_logprobs(policy, s)[0] for s in samples]

    # the same first update, alone, on a twin: then the second mini-batch's loss by hand
    twin = load_policy(str(tiny_model_dir), device="cpu")
    first = Learner(twin, AlgorithmConfig(learning_rate=lr)).step(four(twin)[:2])
    second = ppo_loss(twin, samples[2:], before[2:])

    learner = Learner(policy, AlgorithmConfig(learning_rate=lr, mini_batches=2))
    metrics = learner.step(samples)
    assert metrics["loss"] == pytest.approx((first["loss"] + second) / 2, rel=1e-4, abs=1e-6)
    assert metrics["clip_fraction"] > 0  # the second mini-batch's ratio left [0.8, 1.28]
    assert metrics["tokens"] == 3 + 5 + 4 + 6
    state = learner.optimizer.state_dict()["state"]
    assert {int(v["step"]) for v in state.values()} == {2}  # two AdamW steps


def test_one_mini_batch_is_the_single_step(tiny_model_dir: Path) -> None:
    results = []
    for count in (1, 4):
        policy = load_policy(str(tiny_model_dir), device="cpu")
        results.append(Learner(policy, AlgorithmConfig(learning_rate=5e-2, mini_batches=count)))
        metrics = results[-1].step(four(policy))
        if count == 1:
            assert metrics["clip_fraction"] == 0.0  # ratio 1 at the step: the clip never acts
    single, split = (r.policy.model.lm_head.weight for r in results)  # type: ignore[union-attr]
    assert not torch.equal(single, split)  # four updates are not one


def test_more_mini_batches_than_episodes_is_refused() -> None:
    with pytest.raises(
        ValidationError, match=r"algorithm\.miniBatches: 9 is more than the step's 8"
    ):
        AlgorithmConfig(group_size=4, tasks_per_step=2, mini_batches=9)
    assert AlgorithmConfig(group_size=4, tasks_per_step=2, mini_batches=8).mini_batches == 8
