"""GRPO advantages against hand-computed values, Dr.GRPO, and dynamic sampling."""

from __future__ import annotations

import pytest
import torch

from kubecua_trainer.advantage import assign_group_advantages, grpo_advantages, is_zero_variance
from kubecua_trainer.tokens import Sample


def _sample(group: str, reward: float) -> Sample:
    ids = torch.tensor([1, 2, 3])
    mask = torch.tensor([False, True, True])
    return Sample(ids, mask, torch.zeros(3), None, None, reward=reward, group_id=group)


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


def test_dynamic_sampling_skips_and_counts_zero_variance_groups() -> None:
    samples = [_sample("a", r) for r in (1, 0)] + [_sample("b", 0) for _ in range(2)]
    samples += [_sample("c", 1) for _ in range(2)]
    kept, zero_var = assign_group_advantages(samples, skip_zero_variance=True)
    assert zero_var == 2
    assert [s.group_id for s in kept] == ["a", "a"]
    assert [s.advantage for s in kept] == pytest.approx([0.7071, -0.7071], rel=1e-3)

    kept_all, zero_var_all = assign_group_advantages(samples, skip_zero_variance=False)
    assert zero_var_all == 2
    assert len(kept_all) == 6
    assert [s.advantage for s in kept_all[2:]] == [0, 0, 0, 0]
