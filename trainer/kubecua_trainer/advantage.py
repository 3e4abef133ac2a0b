"""GRPO advantages: each episode's reward relative to its group (same task, G episodes).

Dynamic sampling (DAPO, arXiv 2503.14476) drops groups whose rewards are all equal: their
advantages are all 0, so they only dilute the batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubecua_trainer.tokens import Sample


def grpo_advantages(
    rewards: list[float], normalize_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """(r - mean) / (std + eps), std the sample standard deviation (n - 1).

    normalize_std=False is Dr.GRPO (arXiv 2503.20783): only the mean is subtracted.
    Example: [1, 0, 0, 0] -> mean 0.25, std 0.5 -> [1.5, -0.5, -0.5, -0.5] (approximately, eps);
    Dr.GRPO -> [0.75, -0.25, -0.25, -0.25]. A single reward or equal rewards give all zeros.
    """
    if not rewards:
        return []
    mean = statistics.fmean(rewards)
    centered = [r - mean for r in rewards]
    if not normalize_std or len(rewards) < 2:
        return centered if len(rewards) > 1 else [0.0]
    std = statistics.stdev(rewards)
    return [c / (std + eps) for c in centered]


def is_zero_variance(rewards: Sequence[float], tol: float = 1e-9) -> bool:
    """True when every reward equals the first. Example: [0, 0, 0] -> True; [0, 1] -> False."""
    return all(abs(r - rewards[0]) <= tol for r in rewards)


def assign_group_advantages(
    samples: list[Sample], normalize_std: bool = True, skip_zero_variance: bool = True
) -> tuple[list[Sample], int]:
    """Set sample.advantage within each group_id; return (kept samples, zero-variance groups).

    One sample per episode (trajectory mode). For per-turn samples compute advantages per episode
    with grpo_advantages and copy them to each turn's sample instead.
    """
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s)
    kept: list[Sample] = []
    zero_var = 0
    for members in groups.values():
        rewards = [s.reward for s in members]
        if is_zero_variance(rewards):
            zero_var += 1
            if skip_zero_variance:
                continue
        for s, a in zip(members, grpo_advantages(rewards, normalize_std), strict=True):
            s.advantage = a
        kept += members
    return kept, zero_var
