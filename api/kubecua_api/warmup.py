"""spec.warmup.stopWhen: end the supervised warm-up by measurement, on training tasks only.

A warm-up that is too short leaves GRPO a policy that never samples a success (every group has
equal rewards: no signal); one that is too long leaves it nothing to add (every group already
succeeds). The rule measures, after every `everyEpochs` epochs, the greedy success (pass@1) and
pass@k at temperature 1 (the share of tasks with at least one success in k episodes) on `tasks`
training tasks, and stops once pass@1 reaches greedyPassMin and pass@k reaches passAtKMin, or
as soon as pass@1 is above greedyPassMax (measured too late: it stops there rather than go
further). spec.warmup.epochs is then the most it runs, and no measurement follows its last
epochs (they end the warm-up whatever it would say). Held-out tasks are never measured.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from kubecua_api.common import ApiModel


class WarmupStopConfig(ApiModel):
    every_epochs: int = Field(
        default=5, ge=1, le=1000, description="Epochs between two measurements."
    )
    tasks: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Training tasks measured, drawn from spec.tasks with spec.seed (the same"
        " ones at every measurement; all of them when there are fewer).",
    )
    greedy_pass_min: float = Field(
        default=0.2, ge=0, le=1, description="Stop once greedy pass@1 is at least this..."
    )
    greedy_pass_max: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="...and at most this; above it the warm-up stops at once (overshot).",
    )
    k: int = Field(default=8, ge=1, le=64, description="Episodes per task at temperature 1.")
    pass_at_k_min: float = Field(
        default=0.7, ge=0, le=1, description="Stop only once pass@k is at least this."
    )

    @model_validator(mode="after")
    def _window(self) -> WarmupStopConfig:
        if self.greedy_pass_min > self.greedy_pass_max:
            raise ValueError("greedyPassMin must not exceed greedyPassMax")
        return self
