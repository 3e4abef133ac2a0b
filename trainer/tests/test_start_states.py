"""Start states in training: a GRPO group whose episodes started from different screens is
counted (batch stats, the metric, the report) and, with spec.tasks.mixedStartGroups: exclude,
left out of the batch; spec.tasks.verified trains only on the tasks a verified manifest calls
usable, counts the others by reason (metrics, report) and refuses a manifest older than its
tasks. Pure functions and files, no desktops: under a second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kubecua_api.taskmanifest import EpisodeRecord, TaskRecord, VerifiedManifest, task_digest
from kubecua_api.taskverify import VerifiedTasksConfig
from kubecua_sandbox_client import StartFingerprint
from kubecua_trainer.config import AlgorithmConfig, ConfigError
from kubecua_trainer.learning.batch import assemble_batch
from kubecua_trainer.report import RunReport
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.rollout.verified import publish_verified, select_verified
from kubecua_trainer.telemetry.metrics import TrainerMetrics
from kubecua_trainer.tokens import Sample

SCREEN = "0" * 64
OTHER = "f" * 16 + "0" * 48  # 64 bits off: another screen
NEAR = "0" * 63 + "3"  # 2 bits off: the same screen (a cursor)


def _episode(key: str, score: float, screen: str | None) -> EpisodeResult:
    ep = EpisodeResult("t", "s0001-g00", key)
    ep.score(score)
    ep.start_fingerprint = StartFingerprint(screen=screen) if screen else None
    ids = torch.tensor([1, 2, 3])
    ep.samples = [Sample(ids, torch.tensor([False, True, True]), torch.zeros(3), None, None)]
    return ep


def _group(screens: list[str | None]) -> Group:
    g = Group("t", "s0001-g00")
    g.episodes = [_episode(f"e{i}", float(i % 2), s) for i, s in enumerate(screens)]
    return g


def test_a_group_started_from_different_screens_is_mixed() -> None:
    assert not _group([SCREEN, NEAR, SCREEN, None]).mixed_start  # None: an older server
    assert _group([SCREEN, SCREEN, OTHER, SCREEN]).mixed_start
    failed = _group([SCREEN, OTHER])
    failed.episodes[1].fail("setup_failed", "x")  # an excluded episode's start does not count
    assert not failed.mixed_start


def test_mixed_groups_are_counted_and_trained_on_unless_excluded() -> None:
    groups = [_group([SCREEN, OTHER]), _group([SCREEN, SCREEN])]
    counted = assemble_batch(groups, AlgorithmConfig(), None)
    assert (counted.mixed_start_groups, len(counted.samples)) == (1, 4)
    assert counted.stats()["mixed_start_groups"] == 1.0
    excluded = assemble_batch(groups, AlgorithmConfig(), None, exclude_mixed_start=True)
    assert (excluded.mixed_start_groups, len(excluded.samples)) == (1, 2)


def _record(
    tid: str, task: dict, verdict: str = "verified", start: bool | None = True
) -> TaskRecord:
    ep = EpisodeRecord(solution="reference", attempt=0, sandbox="u", score=1.0, seconds=1.0)
    return TaskRecord(id=tid, path=f"{tid}.json", digest=task_digest(task), verdict=verdict,
                      reproducible_start=start, scores={"reference": [1.0]}, seconds=1.0,
                      episodes=[ep])  # fmt: skip


def _tasks() -> list[dict]:
    return [{"id": f"t{i}", "instruction": f"do {i}", "evaluator": {"func": "x"}} for i in range(5)]


def _manifest(tmp_path: Path, records: list[TaskRecord]) -> Path:
    when = "2026-11-29T06:00:00+00:00"
    m = VerifiedManifest(created=when, folder="/tasks", content_hash="h", sandboxes=["u"],
                         repeats=2, seconds=1.0, summary={}, tasks=records)  # fmt: skip
    path = tmp_path / "verified.json"
    path.write_text(m.model_dump_json())
    return path


def test_verified_manifest_leaves_out_known_bad_tasks_and_says_so(tmp_path: Path) -> None:
    tasks = _tasks()
    records = [
        _record("t0", tasks[0]),
        _record("t1", tasks[1], "reference-fails"),
        _record("t2", tasks[2], "noop-passes"),
        _record("t3", tasks[3], "verified", start=False),  # a random start
    ]  # t4: not in the manifest
    cfg = VerifiedTasksConfig(manifest=str(_manifest(tmp_path, records)))
    kept, status = select_verified(tasks, cfg)
    assert [t["id"] for t in kept] == ["t0"]
    assert status is not None
    assert (status.trained, status.left_out) == (1, 4)
    assert status.reasons == {"noop-passes": 1, "reference-fails": 1,
                              "unreproducible-start": 1, "unverified": 1}  # fmt: skip
    lenient = VerifiedTasksConfig(manifest=cfg.manifest, require_reproducible_start=False)
    assert [t["id"] for t in select_verified(tasks, lenient)[0]] == ["t0", "t3"]

    metrics, out = TrainerMetrics(), tmp_path / "run"
    publish_verified(status, metrics, None, out)
    assert metrics.registry.get_sample_value("kubecua_trainer_tasks_trained") == 1
    left = metrics.registry.get_sample_value(
        "kubecua_trainer_tasks_left_out", {"reason": "unverified"}
    )
    assert left == 1
    assert json.loads((out / "verified-tasks.json").read_text())["leftOut"] == 4
    report = RunReport(out, "run")
    report.append_history({"step": 1, "reward_mean": 0.5, "mixed_start_groups": 2.0})
    html = report.render().read_text()
    assert (
        "training on 1 tasks, 4 left out (noop-passes 1, reference-fails 1,"
        " unreproducible-start 1, unverified 1)" in html
    )
    assert "started from different screens: 2 in 1 steps (steps 1;" in html


def test_a_manifest_older_than_its_tasks_is_refused(tmp_path: Path) -> None:
    tasks = _tasks()
    path = _manifest(tmp_path, [_record(t["id"], t) for t in tasks])
    tasks[2] = {**tasks[2], "instruction": "do something else"}
    with pytest.raises(
        ConfigError,
        match=r"spec.tasks.verified.manifest: .* is older than the tasks t2: their content changed",
    ):
        select_verified(tasks, VerifiedTasksConfig(manifest=str(path)))


def test_a_missing_or_foreign_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"spec\.tasks\.verified\.manifest: cannot read"):
        select_verified(_tasks(), VerifiedTasksConfig(manifest=str(tmp_path / "none.json")))
    (tmp_path / "x.json").write_text('{"tasks": []}')
    with pytest.raises(ConfigError, match="is not a verified manifest"):
        select_verified(_tasks(), VerifiedTasksConfig(manifest=str(tmp_path / "x.json")))
    only_bad = _manifest(tmp_path, [_record(t["id"], t, "flaky") for t in _tasks()])
    with pytest.raises(ConfigError, match="leaves no task to train on"):
        select_verified(_tasks(), VerifiedTasksConfig(manifest=str(only_bad)))
