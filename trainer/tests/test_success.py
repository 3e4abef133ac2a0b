"""The trainer calls an episode a success exactly where the episode server does: both use
kubecua_sandbox_client.is_success (the server's side: episode-server/tests/test_success_outcome.py),
for episode outcomes, the step's success rate and what the replay buffer keeps."""

from __future__ import annotations

import pytest

from kubecua_sandbox_client import is_success
from kubecua_trainer.learning.batch import Batch
from kubecua_trainer.rollout.records import SUCCESS_SCORE, EpisodeResult

EDGES = [
    (1.0, "success"),
    ((1.0 + 1.0 + 1.0) / 3, "success"),  # "and"-joined metrics at full marks
    (0.999, "failure"),  # a fuzzy near miss (the trainer used to call this a success)
    (0.75, "failure"),  # partial credit
    (0.0, "failure"),
]


@pytest.mark.parametrize(("score", "outcome"), EDGES)
def test_an_episode_succeeds_only_at_full_marks(score: float, outcome: str) -> None:
    episode = EpisodeResult("t", "g", "k")
    episode.score(score)
    assert episode.outcome == outcome
    assert is_success(score) is (outcome == "success")


def test_the_step_success_rate_counts_the_same_episodes() -> None:
    batch = Batch(rewards=[score for score, _ in EDGES])
    assert batch.stats()["success_rate"] == pytest.approx(2 / 5)
    assert SUCCESS_SCORE == 1.0
