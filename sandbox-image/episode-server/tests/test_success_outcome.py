"""The server's outcome metric says success exactly where the trainer does: both use
kubecua_sandbox_client.is_success (the trainer's side: trainer/tests/test_success.py)."""

from __future__ import annotations

import pytest

from kubecua_episode.sandbox import scored_outcome


@pytest.mark.parametrize(
    ("score", "outcome"),
    [
        (1.0, "success"),
        ((1.0 + 1.0 + 1.0) / 3, "success"),  # "and"-joined metrics at full marks
        (0.999, "failure"),  # a fuzzy near miss (the trainer once called this a success)
        (0.75, "failure"),  # partial credit
        (0.0, "failure"),
    ],
)
def test_only_full_marks_are_counted_as_success(score: float, outcome: str) -> None:
    assert scored_outcome(score) == outcome
