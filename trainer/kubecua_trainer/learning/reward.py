"""The shaped reward GRPO trains on (spec.reward), computed from what an episode did.

    shaped = score_w * score + partial_w * partial + format_w * valid_fraction
             - repeat_w * repeats - invalid_w * invalid - turn_w * turns

- score: the evaluator's score in [0, 1]; success is still `is_success(score)`, and
  evaluations, status and the success metrics read it alone.
- partial: the partial credit the task declares (`partial` beside `evaluator`, scored by the
  episode server with a desktop-env metric); a task without one adds 0 to every episode. An
  episode whose partial metric failed takes the mean partial of its group's other episodes
  (0 when none has one): the term then moves no advantage, neither its own nor the others', so
  the failure is never trained as a partial score of 0 (Slime-OSWorld's shape is
  score + 0.3 x partial - penalties).
- valid_fraction: the replies that parsed as an action the sandbox accepted, over all replies.
- repeats: turns whose action is exactly the previous turn's; invalid: replies that did not
  parse or that the sandbox refused; turns: replies generated.

Example (score 1, partial 0.6, 3 turns: a valid action, the same action again, then a reply that
did not parse; weights score 1, partial 0.3, format 0.1, repeat 0.05, invalid 0.1, turn 0.01):
1 + 0.18 + 0.1 * 2/3 - 0.05 - 0.1 - 0.03 = 1.066667.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubecua_api.reward import RewardConfig

if TYPE_CHECKING:
    from kubecua_trainer.rollout.records import EpisodeResult


@dataclass(frozen=True)
class RewardTerms:
    """What one scored episode did, term by term (before weights)."""

    score: float
    partial: float | None  # None: the task declares none, or its metric failed
    partial_failed: bool
    turns: int
    invalid: int
    repeats: int

    @property
    def valid_fraction(self) -> float:
        """Replies that were valid actions over replies; 0 for an episode with no reply."""
        return (self.turns - self.invalid) / self.turns if self.turns else 0.0


def terms_of(ep: EpisodeResult) -> RewardTerms:
    """The terms of a scored episode, from its turns and its evaluation."""
    invalid = sum(1 for t in ep.turns if t.action is None or t.refused)
    repeats = sum(
        1
        for prev, cur in zip(ep.turns, ep.turns[1:], strict=False)
        if cur.action is not None and not cur.refused and cur.action == prev.action
    )
    return RewardTerms(
        score=float(ep.reward or 0.0),
        partial=ep.partial,
        partial_failed=ep.partial_error is not None,
        turns=len(ep.turns),
        invalid=invalid,
        repeats=repeats,
    )


def shaped_reward(terms: RewardTerms, cfg: RewardConfig, partial_fill: float = 0.0) -> float:
    """The weighted sum; partial_fill stands for the partial credit when the metric failed."""
    partial = terms.partial if terms.partial is not None else 0.0
    if terms.partial_failed:
        partial = partial_fill
    pen = cfg.penalties
    return (
        cfg.score * terms.score
        + cfg.partial * partial
        + cfg.format * terms.valid_fraction
        - pen.repeat * terms.repeats
        - pen.invalid * terms.invalid
        - pen.turn * terms.turns
    )


def group_rewards(terms: list[RewardTerms], cfg: RewardConfig) -> list[float]:
    """The shaped rewards of one group's scored episodes. A failed partial metric takes the
    mean of the group's measured partials (module docstring).

    Example (partial weight 0.5, score weight 1): scores [1, 0, 0], partials [0.8, 0.2, failed]
    -> the failed one gets mean(0.8, 0.2) = 0.5 -> [1.4, 0.1, 0.25].
    """
    measured = [t.partial for t in terms if not t.partial_failed and t.partial is not None]
    fill = statistics.fmean(measured) if measured else 0.0
    return [shaped_reward(t, cfg, fill) for t in terms]


def is_default(cfg: RewardConfig) -> bool:
    """True when the shaped reward is the evaluator's score itself (spec.reward left out)."""
    return cfg == RewardConfig()
