"""spec.tasks.verified: the training tasks a verified manifest (kubecua_api/taskmanifest.py,
written by `kubecua tasks verify`) calls usable, and what it left out, by reason, for the run's
status, metrics and report.

Refused (ConfigError, naming the field) before anything is built: a manifest that is missing or
not a manifest; a manifest older than a task it verified (the task's content digest differs
from the one verified: a changed instruction, setup or evaluator was never verified); and a
manifest that leaves no task."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from kubecua_api.taskmanifest import VerifiedManifest, task_digest
from kubecua_api.taskverify import VerifiedTasksConfig, VerifiedTasksStatus
from kubecua_trainer.config import ConfigError

if TYPE_CHECKING:
    from kubecua_trainer.telemetry.metrics import TrainerMetrics
    from kubecua_trainer.telemetry.status import StatusPatcher

FIELD = "spec.tasks.verified.manifest"
REPORT_FILE = "verified-tasks.json"  # under the run's output directory (report/tasks.py)


def load_manifest(path: Path) -> VerifiedManifest:
    try:
        return VerifiedManifest.model_validate_json(path.read_bytes())
    except OSError as err:
        raise ConfigError(f"{FIELD}: cannot read {path}: {err.strerror}") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"{FIELD}: {path} is not a verified manifest (`kubecua tasks verify` writes one):"
            f" {where}: {first['msg']}"
        ) from None


def select_verified(
    tasks: list[dict[str, Any]], cfg: VerifiedTasksConfig | None
) -> tuple[list[dict[str, Any]], VerifiedTasksStatus | None]:
    """The tasks to train on, and the selection's status (None without spec.tasks.verified)."""
    if cfg is None:
        return tasks, None
    path = Path(cfg.manifest)
    manifest = load_manifest(path)
    verified = manifest.by_id()
    stale = [
        str(t["id"])
        for t in tasks
        if str(t["id"]) in verified and verified[str(t["id"])].digest != task_digest(t)
    ]
    if stale:
        more = f" and {len(stale) - 5} more" if len(stale) > 5 else ""
        raise ConfigError(
            f"{FIELD}: {path} (verified {manifest.created}) is older than the tasks"
            f" {', '.join(stale[:5])}{more}: their content changed since; verify them again"
            f" (kubecua tasks verify {manifest.folder})"
        )
    keep, reasons = [], Counter[str]()
    for t in tasks:
        record = verified.get(str(t["id"]))
        if record is None:
            reasons["unverified"] += 1
        elif record.verdict != "verified":
            reasons[record.verdict] += 1
        elif cfg.require_reproducible_start and record.reproducible_start is not True:
            reasons["unreproducible-start"] += 1
        else:
            keep.append(t)
    if not keep:
        raise ConfigError(f"{FIELD}: {path} leaves no task to train on (left out: {dict(reasons)})")
    left_out = sum(reasons.values())
    status = VerifiedTasksStatus(
        manifest=str(path),
        trained=len(keep),
        left_out=left_out,
        reasons=dict(sorted(reasons.items())),
    )
    return keep, status


def publish_verified(
    status: VerifiedTasksStatus | None,
    metrics: TrainerMetrics,
    patcher: StatusPatcher | None,
    out_dir: Path,
) -> None:
    """The selection in the metrics, the TrainingRun's status and the report's file."""
    if status is None:
        return
    metrics.observe_tasks(status.trained, status.reasons)
    wire = status.model_dump(by_alias=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    if patcher is not None:
        patcher.patch({"verifiedTasks": wire})
    (out_dir / REPORT_FILE).write_text(json.dumps(wire, indent=2) + "\n")
