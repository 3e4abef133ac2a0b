"""GRPO's group functions, pure: score a group (advantages), tell a zero-variance group, credit
an episode's advantage to its turns. batch.assemble_batch composes them into the step's batch;
everything that trains (the run, the bandit test, the smoke run) goes through it.

Dynamic sampling (DAPO, arXiv 2503.14476) drops groups whose rewards are all equal: their
advantages are all 0, so they only dilute the batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


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


def credit_turns(advantage: float, turns: int, per_turn: bool, discount: float) -> list[float]:
    """The advantage of each of an episode's `turns` samples: the episode's own for its one
    trajectory sample (or every sample outside perTurn mode); in perTurn mode turn t of T gets
    advantage * discount^(T-1-t), so earlier turns get less credit.

    Example: advantage 1.0, 3 turns, discount 0.5, perTurn -> [0.25, 0.5, 1.0]; not perTurn ->
    [1.0, 1.0, 1.0].
    """
    last = turns - 1
    return [advantage * (discount ** (last - t) if per_turn else 1.0) for t in range(turns)]
