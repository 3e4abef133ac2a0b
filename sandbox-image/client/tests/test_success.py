"""The one definition of a solved task, on the edge values the trainer and the episode server
both meet: full marks, a near miss, partial credit from "and"-joined metrics, and NaN."""

from __future__ import annotations

import pytest

from kubecua_sandbox_client import SUCCESS_SCORE, is_success

# (score, solved): the same table is asserted by the trainer's and the episode server's tests.
EDGES = [
    (1.0, True),
    ((1.0 + 1.0 + 1.0) / 3, True),  # three "and"-joined metrics at full marks: exactly 1.0
    (0.999, False),  # a fuzzy near miss is not a solution
    (1.0 - 1e-12, False),
    (0.75, False),  # "and" of a full and a half-credit metric
    (0.0, False),
    (float("nan"), False),
]


@pytest.mark.parametrize(("score", "solved"), EDGES)
def test_only_full_marks_count_as_success(score: float, solved: bool) -> None:
    assert is_success(score) is solved


def test_the_threshold_is_osworlds_full_score() -> None:
    assert SUCCESS_SCORE == 1.0
