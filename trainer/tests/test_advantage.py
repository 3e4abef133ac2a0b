"""GRPO's group functions against hand-computed values (advantages, Dr.GRPO, zero variance, turn
credit), and batch.assemble_batch, the one path that turns groups into what the learner trains:
dynamic sampling, small groups, excluded episodes, success replay and perTurn credit."""

from __future__ import annotations

import pytest
import torch

from kubecua_trainer.config import AlgorithmConfig, ReplayConfig
from kubecua_trainer.learning.advantage import credit_turns, grpo_advantages, is_zero_variance
from kubecua_trainer.learning.batch import assemble_batch
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.tokens import Sample


def _sample(tag: int = 0) -> Sample:
    ids = torch.tensor([1, 2, tag])
    mask = torch.tensor([False, True, True])
    return Sample(ids, mask, torch.zeros(3), None, None)


def _group(task: str, rewards: list[float | None], turns: int = 1) -> Group:
    """One episode per reward, `turns` samples each; None is an infrastructure failure."""
    g = Group(task, f"s0001-{task}")
    for i, r in enumerate(rewards):
        ep = EpisodeResult(task, g.group_id, f"{g.group_id}-e{i:02d}")
        if r is None:
            ep.fail("sandbox_lost", "gone")
        else:
            ep.score(r)
            ep.samples = [_sample(10 * i + t) for t in range(turns)]
            for sample in ep.samples:  # as the rollout labels them
                sample.task_id, sample.group_id = task, g.group_id
        g.episodes.append(ep)
    return g


def test_grpo_normalises_by_group_std() -> None:
    # mean 0.25, sample std sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5
    assert grpo_advantages([1, 0, 0, 0], eps=0) == pytest.approx([1.5, -0.5, -0.5, -0.5])
    # mean 0.5, std sqrt(4 * 0.25 / 3) = 0.57735
    assert grpo_advantages([1, 1, 0, 0], eps=0) == pytest.approx(
        [0.866025, 0.866025, -0.866025, -0.866025], rel=1e-5
    )


def test_dr_grpo_only_subtracts_the_mean() -> None:
    assert grpo_advantages([1, 0, 0, 0], normalize_std=False) == pytest.approx(
        [0.75, -0.25, -0.25, -0.25]
    )
    assert grpo_advantages([0.5, 0.25], normalize_std=False) == pytest.approx([0.125, -0.125])


def test_equal_rewards_give_zero_advantages() -> None:
    assert grpo_advantages([0, 0, 0]) == [0, 0, 0]
    assert grpo_advantages([1.0]) == [0.0]
    assert is_zero_variance([1, 1, 1])
    assert not is_zero_variance([1, 0])


def test_turn_credit_is_discounted_backwards_only_in_per_turn_mode() -> None:
    assert credit_turns(1.0, 3, per_turn=True, discount=0.5) == [0.25, 0.5, 1.0]
    assert credit_turns(-2.0, 2, per_turn=True, discount=0.9) == pytest.approx([-1.8, -2.0])
    assert credit_turns(1.0, 3, per_turn=False, discount=0.5) == [1.0, 1.0, 1.0]


def test_dynamic_sampling_skips_and_counts_zero_variance_groups() -> None:
    groups = [_group("a", [1, 0]), _group("b", [0, 0]), _group("c", [1, 1])]
    batch = assemble_batch(groups, AlgorithmConfig(dynamic_sampling=True), None)
    assert batch.zero_variance_groups == 2
    assert [s.group_id for s in batch.samples] == ["s0001-a", "s0001-a"]
    # [1, 0]: mean 0.5, std 0.7071 -> +-0.7071
    assert [s.advantage for s in batch.samples] == pytest.approx([0.7071, -0.7071], rel=1e-3)
    assert batch.stats()["zero_variance_group_fraction"] == pytest.approx(2 / 3)

    groups = [_group("a", [1, 0]), _group("b", [0, 0]), _group("c", [1, 1])]
    kept = assemble_batch(groups, AlgorithmConfig(dynamic_sampling=False), None)
    assert kept.zero_variance_groups == 2
    assert len(kept.samples) == 6
    assert [s.advantage for s in kept.samples[2:]] == [0, 0, 0, 0]


def test_failed_episodes_are_left_out_and_a_group_of_one_is_small() -> None:
    groups = [_group("a", [1, None, 0, 0]), _group("b", [1, None])]
    batch = assemble_batch(groups, AlgorithmConfig(), None)
    assert batch.small_groups == 1
    assert batch.rewards == [1, 0, 0, 1]  # every scored episode, the small group's too
    # group a scores [1, 0, 0]: mean 1/3, std 0.57735 -> [1.1547, -0.57735, -0.57735]
    assert [s.advantage for s in batch.samples] == pytest.approx(
        [1.1547, -0.57735, -0.57735], rel=1e-4
    )
    assert batch.stats()["success_rate"] == 0.5


def test_replay_adds_a_stored_success_to_an_all_fail_group() -> None:
    algo = AlgorithmConfig(replay=ReplayConfig(enabled=True))
    replay = SuccessReplay()
    first = assemble_batch([_group("t", [1, 0])], algo, replay)
    assert len(replay) == 1  # the success of step 1 is stored
    assert first.replay_injections == 0
    batch = assemble_batch([_group("t", [0, 0, 0])], algo, replay)
    assert batch.replay_injections == 1
    assert batch.zero_variance_groups == 0
    # [0, 0, 0] + the replayed 1: mean 0.25, std 0.5 -> [-0.5, -0.5, -0.5, 1.5]
    assert [s.advantage for s in batch.samples] == pytest.approx([-0.5, -0.5, -0.5, 1.5], rel=1e-4)
    assert int(batch.samples[-1].input_ids[2]) == 0  # the stored episode's sample (tag 0)
    assert batch.rewards == [0, 0, 0]  # statistics count only this step's episodes


def test_a_near_miss_is_not_stored_as_a_success() -> None:
    algo = AlgorithmConfig(replay=ReplayConfig(enabled=True))
    replay = SuccessReplay()
    assemble_batch([_group("t", [0.999, 0])], algo, replay)
    assert len(replay) == 0


def test_per_turn_samples_get_the_episode_advantage_discounted() -> None:
    algo = AlgorithmConfig(mode="perTurn", turn_discount=0.5, normalize_std=False)
    batch = assemble_batch([_group("t", [1, 0], turns=3)], algo, None)
    # Dr.GRPO [0.5, -0.5], then 0.25, 0.5, 1 per turn
    assert [s.advantage for s in batch.samples] == pytest.approx(
        [0.125, 0.25, 0.5, -0.125, -0.25, -0.5]
    )
