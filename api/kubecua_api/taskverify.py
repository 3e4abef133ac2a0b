"""spec.tasks.verified and spec.tasks.mixedStartGroups of a TrainingRun, and the status they
fill: train only on tasks a verified manifest (kubecua_api/taskmanifest.py, written by
`kubecua tasks verify`) calls usable, and say what to do with a GRPO group whose episodes
started from different screens. docs/tasks.md."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kubecua_api.common import ApiModel


class VerifiedTasksConfig(ApiModel):
    manifest: str = Field(
        min_length=1,
        max_length=4096,
        description="Path of a verified manifest (`kubecua tasks verify`'s JSON) inside the"
        " trainer image or a volume. Tasks it does not list, or lists with a verdict other than"
        " verified, are left out; a task whose content differs from what the manifest verified"
        " refuses the run (the manifest is older than the task).",
    )
    require_reproducible_start: bool = Field(
        default=True,
        description="Also leave out verified tasks whose repeats started from different screens.",
    )


class VerifiedTasksStatus(ApiModel):
    manifest: str = Field(description="The manifest the run's tasks were checked against.")
    trained: int = Field(description="Tasks the run trains on.")
    left_out: int = Field(description="Tasks left out, by any reason.")
    reasons: dict[str, int] = Field(
        description="Tasks left out by reason: unverified (not in the manifest), a verdict"
        " (reference-fails, noop-passes, wrong-passes, flaky, setup-fails), or"
        " unreproducible-start."
    )


MixedStartGroups = Literal["count", "exclude"]
MIXED_START_DESCRIPTION = (
    "A GRPO group whose episodes started from different screens (their start fingerprints"
    " differ; trainer/kubecua_trainer/rollout/groups.py) compares different problems: `count`"
    " counts it (metric kubecua_trainer_mixed_start_groups_total, the report) and trains on it;"
    " `exclude` also leaves it out of the batch."
)
