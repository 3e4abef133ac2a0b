"""What counts as a solved task: one definition for the episode server (its outcome metric) and
the trainer (episode outcomes, success rates, replay, evaluation), so the two never disagree."""

from __future__ import annotations

SUCCESS_SCORE = 1.0
"""OSWorld's bar: a task is solved at score 1.0, as its evaluators return for a full solution."""


def is_success(score: float) -> bool:
    """True when `score` (an evaluation's, in [0, 1]) means the task was solved.

    Why exactly 1.0 and no tolerance: OSWorld's metrics return 1.0 for a solution; a fractional
    score is partial credit (the mean of "and"-joined metrics, a fuzzy match ratio), and counting
    a fuzzy 0.999 as solved would turn near-misses into successes. Full marks stay exactly 1.0 in
    floating point: the mean of n scores of 1.0 is sum = n, divided by n. NaN is never a success.
    Examples: 1.0 -> True; 0.999 -> False; (1.0 + 0.5) / 2 = 0.75 -> False; (1 + 1 + 1) / 3 -> True.
    """
    return score >= SUCCESS_SCORE
