"""TaskVerification: `kubecua tasks verify DIR --pool NAME` as a Job the operator runs
(docs/tasks.md). The spec names a SandboxPool of the namespace and a folder of tasks inside the
verifier's image; the operator runs one Job that plays every task's solutions on the pool's
sandboxes and writes the verified manifest (kubecua_api/taskmanifest.py) into the ConfigMap
`<name>-manifest`, key `verified.json`; the status carries its summary.

Left out: tasks from a ConfigMap or a volume (the folder is one the image holds: the built-in
families' files are in the tasks image at /opt/kubecua/tasks), and verifying again (the spec is
immutable: a new TaskVerification verifies again)."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from kubecua_api.common import ApiModel, Condition, DateTime, Image, Quantity, conditions

# The key of the manifest in <name>-manifest, the one a TrainingRun's configMapRef mounts.
from kubecua_api.taskverify import MANIFEST_KEY as MANIFEST_KEY

TASKVERIFICATION_KIND: Final = "TaskVerification"
TASKVERIFICATION_PLURAL: Final = "taskverifications"
TASKS_ROOT: Final = "/opt/kubecua/tasks"  # the built-in families' folders in the tasks image
TASK_FOLDER_PATTERN = r"^/[^:]*$"  # absolute; ':' would not survive the Job's argument list


class VerificationTasks(ApiModel):
    path: str = Field(
        min_length=2,
        max_length=4096,
        pattern=TASK_FOLDER_PATTERN,
        description="A folder of task JSON inside the verifier's image, searched recursively"
        f" (`<id>.json` with `<id>.solutions.json`); the built-in families are under {TASKS_ROOT}"
        f" (e.g. {TASKS_ROOT}/colourkeys/train).",
    )


class VerifierResources(ApiModel):
    limits: dict[str, Quantity] | None = Field(
        default=None, max_length=16, description="Most of each resource the verifier may use."
    )
    requests: dict[str, Quantity] | None = Field(
        default=None, max_length=16, description="Resources reserved for the verifier pod."
    )


class TaskVerificationSpec(ApiModel):
    pool_ref: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Name of a SandboxPool in the same namespace: its ready sandboxes play the"
        " episodes, leased through the episode API (a busy sandbox waits), with its token.",
    )
    tasks: VerificationTasks = Field(description="The tasks to verify.")
    repeats: int = Field(
        default=2,
        ge=2,
        le=20,
        description="Episodes of each solution of each task (at least 2, or a flaky task cannot"
        " show).",
    )
    parallelism: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Lease at most this many of the pool's sandboxes at once (one episode each;"
        " a retired sandbox frees its place); absent: every ready sandbox.",
    )
    accessibility_tree: bool = Field(
        default=False,
        description="Also fingerprint each start's accessibility tree (start reproducibility).",
    )
    image: Image | None = Field(
        default=None,
        description="The verifier's image (it holds kubecua-tasks and the tasks); the operator's"
        " default (the tasks image) when empty.",
    )
    resources: VerifierResources | None = Field(
        default=None, description="The verifier pod's requests and limits."
    )
    timeout_seconds: int = Field(
        default=21600,
        ge=60,
        le=604800,
        description="The Job's activeDeadlineSeconds: a verification still running after it"
        " fails (DeadlineExceeded).",
    )
    backoff_limit: int = Field(
        default=1, ge=0, le=10, description="Verifier pods that may fail before the Job fails."
    )


class ManifestRef(ApiModel):
    config_map: str = Field(description="The ConfigMap holding the verified manifest.")
    key: str = Field(description="Its key; mount it as a file for spec.tasks.verified.manifest.")


class TaskVerificationStatus(ApiModel):
    phase: Literal["Pending", "Running", "Succeeded", "Failed"] | None = Field(
        default=None, description="Lifecycle phase."
    )
    job: str | None = Field(default=None, description="The verifier Job's name.")
    manifest: ManifestRef | None = Field(
        default=None, description="Where the verified manifest is, once written."
    )
    tasks: int | None = Field(default=None, description="Tasks verified.")
    usable: int | None = Field(
        default=None,
        description="Tasks a TrainingRun would train on: verified, with a reproducible start.",
    )
    verdicts: dict[str, int] | None = Field(
        default=None,
        description="Tasks per verdict (verified, reference-fails, noop-passes, wrong-passes,"
        " flaky, setup-fails).",
    )
    unreproducible_starts: int | None = Field(
        default=None, description="Tasks whose repeats started from different screens."
    )
    sandboxes: int | None = Field(default=None, description="Sandboxes the episodes ran on.")
    seconds: float | None = Field(default=None, description="Wall-clock seconds of the run.")
    start_time: DateTime | None = Field(default=None, description="When the Job was created.")
    completion_time: DateTime | None = Field(
        default=None, description="When the verification succeeded or failed."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this status describes."
    )
    conditions: list[Condition] | None = conditions(
        "SandboxesReady (the pool has a ready sandbox), Complete, Failed (with the reason),"
        " Degraded (a child that is someone else's or that the API server refused)."
    )
