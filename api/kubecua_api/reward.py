"""spec.reward of a TrainingRun: the shaped reward that GRPO trains on, term by term.

Only training uses it. Success keeps one definition (the evaluator's score at the success
threshold), and evaluations, status and the success metrics read the evaluator's score alone.
Every term is off (weight 0) except the evaluator's score (weight 1), so a spec without
spec.reward trains on the score as before. The trainer computes the terms in
kubecua_trainer/learning/reward.py; docs/api.md's tables come from the descriptions below.
"""

from __future__ import annotations

from pydantic import Field

from kubecua_api.common import ApiModel, defaulted

# Bounds keep a typo (30 for 0.3) from drowning the evaluator's score, and a negative weight out:
# a penalty is subtracted, so its weight is given positive.
MAX_WEIGHT = 10.0
MAX_PENALTY = 1.0


class RewardPenalties(ApiModel):
    repeat: float = Field(
        default=0.0,
        ge=0,
        le=MAX_PENALTY,
        description="Subtracted once per turn whose action is exactly the previous turn's action.",
    )
    invalid: float = Field(
        default=0.0,
        ge=0,
        le=MAX_PENALTY,
        description="Subtracted once per reply that did not parse as an action or that the"
        " sandbox refused.",
    )
    turn: float = Field(
        default=0.0,
        ge=0,
        le=MAX_PENALTY,
        description="Subtracted once per turn taken (each reply the policy generated).",
    )


class RewardConfig(ApiModel):
    score: float = Field(
        default=1.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Weight of the evaluator's score (0 to 1), the task's own reward.",
    )
    partial: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Weight of the partial credit a task declares (`partial` beside `evaluator`"
        " in its JSON: a desktop-env metric with a value in 0 to 1, such as fuzzy_match's text"
        " similarity). A task without one adds nothing; an episode whose partial metric failed"
        " gets its group's mean partial credit, so the term moves no advantage (counted in"
        " kubecua_trainer_partial_failures_total, never trained as 0).",
    )
    format: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Weight of the fraction of the episode's replies that parsed as an action"
        " the sandbox accepted.",
    )
    penalties: RewardPenalties = defaulted(
        RewardPenalties, "Per-occurrence penalties, each weight subtracted per occurrence."
    )
