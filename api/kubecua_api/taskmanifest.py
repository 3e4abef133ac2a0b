"""The verified manifest: what `kubecua tasks verify` found for each task of a folder (a verdict,
the scores, the seconds, each episode's start-state fingerprint and whether the task's start is
reproducible), written as JSON beside the tasks, and read by a TrainingRun's
spec.tasks.verified (the trainer leaves out every task the manifest does not call usable).

A task is identified by its id and by a digest of its content (canonical JSON of the task
object, so a ConfigMap's copy of a file digests alike): a manifest whose digest of a task
differs from the task a run loads is older than that task, and the run is refused."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal[
    "verified", "reference-fails", "noop-passes", "wrong-passes", "flaky", "setup-fails"
]
Solution = Literal["reference", "noop", "wrong"]
MANIFEST_KIND: Final = "kubecua.dev/VerifiedTasks"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EpisodeRecord(_Model):
    solution: Solution
    attempt: int = Field(ge=0)
    sandbox: str = Field(description="the episode server's URL")
    score: float | None = Field(description="the evaluator's score; null when none came back")
    seconds: float = Field(description="from the start request to the release's answer")
    error: str | None = Field(default=None, description="why the episode has no score")
    setup_failed: bool = False
    screen: str | None = Field(default=None, description="dHash of the first screenshot (hex)")
    a11y: str | None = Field(default=None, description="sha256 of the first accessibility tree")


class TaskRecord(_Model):
    id: str
    path: str = Field(description="the task's file, relative to the verified folder")
    digest: str = Field(description="task_digest() of the task verified")
    verdict: Verdict
    reproducible_start: bool | None = Field(
        description="whether every episode started from the same screen (and accessibility"
        " tree, where fingerprinted); null when fewer than two episodes had a fingerprint"
    )
    scores: dict[Solution, list[float | None]]
    seconds: float = Field(description="the task's episodes' seconds, summed")
    episodes: list[EpisodeRecord]

    @property
    def usable(self) -> bool:
        """Trainable: every solution scored as it should, each time, from one start screen."""
        return self.verdict == "verified" and self.reproducible_start is True


class VerifiedManifest(_Model):
    kind: Literal["kubecua.dev/VerifiedTasks"] = MANIFEST_KIND
    version: Literal[1] = 1
    created: str = Field(description="UTC, ISO 8601")
    folder: str = Field(description="the folder verified, as given")
    content_hash: str = Field(description="content_hash() of the folder's task files verified")
    sandboxes: list[str] = Field(description="the episode servers the episodes ran on")
    repeats: int = Field(ge=1, description="episodes of each solution of each task")
    seconds: float = Field(description="wall-clock seconds of the verification")
    summary: dict[str, int] = Field(description="tasks per verdict, and unreproducible starts")
    tasks: list[TaskRecord]

    def by_id(self) -> dict[str, TaskRecord]:
        return {t.id: t for t in self.tasks}


def task_digest(task: dict[str, Any]) -> str:
    """sha256 of the task object's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(task, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def content_hash(digests: dict[str, str]) -> str:
    """One hash of a folder's tasks from their paths and digests (tasks and solutions)."""
    lines = "".join(f"{path}\t{digest}\n" for path, digest in sorted(digests.items()))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
