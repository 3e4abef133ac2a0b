"""What a TrainingRun costs: the prices a user may set (spec.cost) and the figures the trainer
reports (status.cost).

The figures are sandbox-seconds leased and GPU-seconds held, whole and per trajectory (a training
episode, whatever its outcome) and per successful trajectory. Money appears only where both
prices are set: kubecua knows no price, so it never shows one of its own.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from kubecua_api.common import ApiModel

Currency = Annotated[str, StringConstraints(min_length=1, max_length=16)]


class CostConfig(ApiModel):
    price_per_sandbox_hour: float | None = Field(
        default=None,
        ge=0,
        description="What one sandbox costs per hour leased (e.g. 0.25). No default: without"
        " both prices, cost is reported in seconds only. 0 for sandboxes you do not pay for.",
    )
    price_per_gpu_hour: float | None = Field(
        default=None,
        ge=0,
        description="What one GPU costs per hour held (the trainer's and the sglang engine's)."
        " No default; 0 for GPUs you do not pay for.",
    )
    currency: Currency = Field(
        default="USD", description="A label for the prices (shown beside money figures)."
    )

    @model_validator(mode="after")
    def _both_prices_or_neither(self) -> CostConfig:
        # One price alone would show a money figure that silently leaves the other resource out.
        if (self.price_per_sandbox_hour is None) != (self.price_per_gpu_hour is None):
            raise ValueError(
                "set both pricePerSandboxHour and pricePerGpuHour (0 for a resource you do not"
                " pay for), or neither"
            )
        return self

    @property
    def priced(self) -> bool:
        return self.price_per_sandbox_hour is not None and self.price_per_gpu_hour is not None


class CostStatus(ApiModel):
    sandbox_seconds: float | None = Field(
        default=None,
        description="Sandbox-seconds leased by the whole run: training and evaluation episodes,"
        " from lease to verified reset, summed over the sandboxes.",
    )
    gpu_seconds: float | None = Field(
        default=None,
        description="GPU-seconds held by the whole run: the trainer pods' wall time times the"
        " GPUs of the trainer and of the sglang engine (0 on the CPU).",
    )
    trajectories: int | None = Field(
        default=None, description="Training episodes played, whatever their outcome."
    )
    successful_trajectories: int | None = Field(
        default=None, description="Training episodes that solved their task."
    )
    sandbox_seconds_per_trajectory: float | None = Field(
        default=None, description="sandboxSeconds / trajectories."
    )
    gpu_seconds_per_trajectory: float | None = Field(
        default=None, description="gpuSeconds / trajectories."
    )
    sandbox_seconds_per_success: float | None = Field(
        default=None, description="sandboxSeconds / successfulTrajectories (absent before one)."
    )
    gpu_seconds_per_success: float | None = Field(
        default=None, description="gpuSeconds / successfulTrajectories (absent before one)."
    )
    currency: str | None = Field(
        default=None, description="spec.cost.currency, when both prices are set."
    )
    total: float | None = Field(
        default=None, description="The run's cost at spec.cost's prices (only with both set)."
    )
    per_trajectory: float | None = Field(default=None, description="total / trajectories.")
    per_success: float | None = Field(
        default=None, description="total / successfulTrajectories (absent before one)."
    )
