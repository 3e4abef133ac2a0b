"""spec.tasks.verified and spec.tasks.mixedStartGroups of a TrainingRun, and the status they
fill: train only on tasks a verified manifest (kubecua_api/taskmanifest.py, written by
`kubecua tasks verify`) calls usable, and say what to do with a GRPO group whose episodes
started from different screens. docs/tasks.md."""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field, model_validator

from kubecua_api.common import ApiModel

MANIFEST_KEY: Final = "verified.json"  # the key of a manifest ConfigMap (TaskVerification's)
# The trainer's own mounts and the kernel's: a manifest file mounted there would clash.
RESERVED_MOUNTS = re.compile(r"/(etc/kubecua|var/run/kubecua|dev|proc|sys)(/.*)?")  # fullmatch


class VerifiedTasksConfig(ApiModel):
    manifest: str = Field(
        min_length=1,
        max_length=4096,
        description="Path of a verified manifest (`kubecua tasks verify`'s JSON) inside the"
        " trainer image or a volume. Tasks it does not list, or lists with a verdict other than"
        " verified, are left out; a task whose content differs from what the manifest verified"
        " refuses the run (the manifest is older than the task).",
    )
    config_map_ref: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="A ConfigMap holding the manifest under key verified.json, such as a"
        " TaskVerification's <name>-manifest: the operator mounts that key read-only as the file"
        " `manifest` in the trainer's pods (an absolute path outside /etc/kubecua,"
        " /var/run/kubecua, /dev, /proc and /sys). Only a ConfigMap the run's author may read"
        " (the chart's admission policies). Absent: `manifest` is in the image or a volume.",
    )
    require_reproducible_start: bool = Field(
        default=True,
        description="Also leave out verified tasks whose repeats started from different screens.",
    )

    @model_validator(mode="after")
    def _mounted_where_it_can_be(self) -> VerifiedTasksConfig:
        if self.config_map_ref is None:
            return self
        path = self.manifest
        if not path.startswith("/") or path.endswith("/") or RESERVED_MOUNTS.fullmatch(path):
            raise ValueError(
                f"manifest {path!r}: with configMapRef it is where the manifest is mounted: an"
                " absolute file path outside /etc/kubecua, /var/run/kubecua, /dev, /proc and /sys"
            )
        return self


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
