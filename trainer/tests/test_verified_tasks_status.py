"""spec.tasks.verified on the real local control plane (this tree's CRD): the API server keeps
the new fields (spec.tasks.verified, spec.tasks.mixedStartGroups) and refuses a bad value naming
its path; a run on a verified manifest that lists known-bad tasks trains on the good ones and
says what it left out in status.verifiedTasks, which the CRD stores as patched. About 5 s once
the suite's control plane is up."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_plane import install_trainingrun_crd, require_control_plane
from kubernetes import client

from kubecua_api.taskmanifest import EpisodeRecord, TaskRecord, VerifiedManifest, task_digest
from kubecua_trainer.config import load_from_cluster
from kubecua_trainer.rollout.verified import publish_verified, select_verified
from kubecua_trainer.telemetry.metrics import TrainerMetrics
from kubecua_trainer.telemetry.status import GROUP, PLURAL, VERSION, StatusPatcher

require_control_plane()

TASKS = [{"id": f"t{i}", "instruction": f"do {i}", "evaluator": {"func": "x"}} for i in range(4)]
# t0 good; t1 a broken reference; t2 a no-op that passes; t3 a random start
VERDICTS = [
    ("verified", True),
    ("reference-fails", True),
    ("noop-passes", True),
    ("verified", False),
]


@pytest.fixture(scope="module")
def api(cluster):
    return install_trainingrun_crd(cluster)


def _run(name: str, tasks: dict) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {"model": {"path": "/models/m"}, "sandboxes": {"poolRef": "desktops"},
                 "tasks": tasks, "steps": 5},
    }  # fmt: skip


def _manifest(path: Path) -> None:
    ep = EpisodeRecord(solution="reference", attempt=0, sandbox="u", score=1.0, seconds=1.0)
    records = [
        TaskRecord(
            id=t["id"],
            path=f"{t['id']}.json",
            digest=task_digest(t),
            verdict=v,
            reproducible_start=start,
            scores={"reference": [1.0]},
            seconds=1.0,
            episodes=[ep],
        )
        for t, (v, start) in zip(TASKS, VERDICTS, strict=True)
    ]
    when = "2026-11-29T06:00:00+00:00"
    m = VerifiedManifest(created=when, folder="/tasks", content_hash="h", sandboxes=["u"],
                         repeats=2, seconds=1.0, summary={}, tasks=records)  # fmt: skip
    path.write_text(m.model_dump_json())


def test_a_run_on_a_verified_manifest_leaves_out_known_bad_tasks_in_status(
    api, namespace, tmp_path: Path
) -> None:
    manifest = tmp_path / "verified.json"
    _manifest(manifest)
    custom = client.CustomObjectsApi(api)
    tasks = {
        "path": "/tasks",
        "verified": {"manifest": str(manifest)},
        "mixedStartGroups": "exclude",
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _run("v1", tasks))
    run = load_from_cluster("v1", namespace, api=custom)
    assert run.spec.tasks.mixed_start_groups == "exclude"
    assert run.spec.tasks.verified is not None
    assert run.spec.tasks.verified.require_reproducible_start is True  # the CRD's default
    kept, status = select_verified(TASKS, run.spec.tasks.verified)
    assert [t["id"] for t in kept] == ["t0"]
    publish_verified(status, TrainerMetrics(), StatusPatcher("v1", namespace, api=custom), tmp_path)
    got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "v1")["status"]
    assert got["verifiedTasks"] == {
        "manifest": str(manifest),
        "trained": 1,
        "leftOut": 3,
        "reasons": {"noop-passes": 1, "reference-fails": 1, "unreproducible-start": 1},
    }


def test_the_api_server_refuses_a_bad_mixed_start_groups_naming_it(api, namespace) -> None:
    custom = client.CustomObjectsApi(api)
    bad = _run("v2", {"path": "/tasks", "mixedStartGroups": "drop"})
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, bad)
    assert err.value.status == 422
    assert "spec.tasks.mixedStartGroups" in err.value.body
    missing = _run("v3", {"path": "/tasks", "verified": {}})
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, missing)
    assert "spec.tasks.verified.manifest" in err.value.body
