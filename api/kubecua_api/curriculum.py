"""spec.tasks.curriculum of a TrainingRun: draw tasks by their running pass rate.

A group whose episodes all succeed, or all fail, has equal rewards and teaches GRPO nothing (it
is dropped). The trainer (kubecua_trainer/rollout/curriculum.py) keeps each training task's pass
rate over its last `window` scored episodes and draws the tasks in the band [low, high] (and
those not yet played) with weight 1, the others with weight `floor`, so none is starved.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from kubecua_api.common import ApiModel, defaulted


class PassRateBand(ApiModel):
    low: float = Field(
        default=0.1, ge=0, le=1, description="Lowest pass rate drawn at full weight."
    )
    high: float = Field(
        default=0.9, ge=0, le=1, description="Highest pass rate drawn at full weight."
    )

    @model_validator(mode="after")
    def _high_at_least_low(self) -> PassRateBand:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class CurriculumConfig(ApiModel):
    band: PassRateBand = defaulted(
        PassRateBand,
        "Tasks whose pass rate lies in this band (bounds included) are drawn at weight 1.",
    )
    floor: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="Weight of a task outside the band (always or never solved lately): it is"
        " still drawn, floor times as often as a task in the band.",
    )
    window: int = Field(
        default=32,
        ge=1,
        le=4096,
        description="A task's pass rate is over its last `window` scored episodes (infrastructure"
        " failures do not count).",
    )


class CurriculumStatus(ApiModel):
    step: int = Field(description="The step after which these pass rates hold.")
    tasks: int = Field(description="Training tasks.")
    unplayed: int = Field(description="Tasks with no scored episode yet (drawn at weight 1).")
    never: int = Field(description="Tasks never solved in their window (pass rate 0).")
    below_band: int = Field(description="Tasks solved sometimes, below band.low.")
    in_band: int = Field(description="Tasks whose pass rate lies in the band (weight 1).")
    above_band: int = Field(description="Tasks solved mostly, above band.high.")
    always: int = Field(description="Tasks solved in every episode of their window (rate 1).")
    mean_pass_rate: float | None = Field(
        default=None, description="Mean pass rate of the played tasks."
    )
    histogram: list[int] = Field(
        description="Played tasks per pass-rate bin: [0, 0.1), [0.1, 0.2), ... [0.9, 1].",
        json_schema_extra={"maxItems": 10},
    )
