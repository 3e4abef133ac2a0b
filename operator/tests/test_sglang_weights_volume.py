"""The operator's sglang servers see the weights the trainer writes (issue 20, item 2).

The trainer writes each step's weights under spec.checkpoint.path (<path>/step-N at a checkpoint,
else <path>/weights/step-N) and sends that path in /update_weights_from_disk. The operator-built
sglang Deployment therefore mounts the run's checkpoint PVC read-only at that same path; a run
whose checkpoints would live in the trainer pod's own emptyDir is refused at admission, naming
spec.checkpoint.volume. Asked of the real kube-apiserver (CEL rules, the operator's applied
Deployment and Job); kwok nodes, so no sglang process runs here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun import children, reconcile, status
from kubecua_operator.trainingrun.job import build_job
from kubecua_operator.trainingrun.model import parse

from .conftest import wait_until
from .helpers import pool_manifest, wait_pool
from .test_trainingrun_lifecycle import run_manifest

SGLANG = {"engine": "sglang", "replicas": 1, "gpusPerReplica": 1}
CKPT = {"volume": "run-ckpt", "path": "/data/ckpt"}
MODEL = {"path": "/models/qwen/Qwen2.5-VL-3B", "volume": "models"}


def dry_run(cluster: Any, manifest: dict) -> Any:
    return cluster.kubectl(
        "create", "--dry-run=server", "-n", "default", "-f", "-",
        input=yaml.safe_dump(manifest), check=False,
    )  # fmt: skip


def checkpoint_mounts(pod_spec: dict) -> tuple[dict, dict]:
    """(volume, mount) named checkpoints of a pod template's first container."""
    volume = next(v for v in pod_spec["volumes"] if v["name"] == "checkpoints")
    mount = next(m for m in pod_spec["containers"][0]["volumeMounts"] if m["name"] == "checkpoints")
    return volume, mount


def test_sglang_deployment_mounts_the_trainers_checkpoint_volume_read_only(
    kube, operator, namespace
):
    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1)
    kube.create(
        run_manifest(
            namespace, model=MODEL, rollout=SGLANG, checkpoint=CKPT,
            sandboxes={"poolRef": "desks", "minReady": 1},
        )
    )  # fmt: skip
    deployment = wait_until(lambda: kube.get("Deployment", namespace, "qwen-sglang"), 60, "sglang")
    job = wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    served_volume, served_mount = checkpoint_mounts(deployment["spec"]["template"]["spec"])
    trainer_volume, trainer_mount = checkpoint_mounts(job["spec"]["template"]["spec"])
    # The same PVC at the same path: a model_path the trainer sends resolves in the sglang pod.
    assert trainer_volume["persistentVolumeClaim"]["claimName"] == "run-ckpt"
    assert served_volume["persistentVolumeClaim"] == {"claimName": "run-ckpt", "readOnly": True}
    assert trainer_mount["mountPath"] == served_mount["mountPath"] == "/data/ckpt"
    assert served_mount["readOnly"] is True  # sglang only reads the weights
    assert not trainer_mount.get("readOnly")  # the trainer writes them
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    model = next(m for m in container["volumeMounts"] if m["name"] == "model")
    assert (model["mountPath"], model["readOnly"]) == ("/models/qwen", True)
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["KUBECUA_SGLANG_URLS"] == "http://qwen-sglang:30000"


def test_built_deployment_mounts_the_default_path_when_the_spec_names_none():
    run = parse({
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {"model": {"path": "/m/x"}, "sandboxes": {"urls": ["http://d:1"]},
                 "tasks": {"path": "/t"}, "rollout": {"engine": "sglang"},
                 "checkpoint": {"volume": "c"}, "steps": 1},
    })  # fmt: skip
    deployment, _ = children.build_sglang(run, Settings())
    job = build_job(run, Settings(), suspend=False)
    served = checkpoint_mounts(deployment["spec"]["template"]["spec"])
    trained = checkpoint_mounts(job["spec"]["template"]["spec"])
    assert served[1] == {"name": "checkpoints", "mountPath": "/ckpt", "readOnly": True}
    assert trained[1] == {"name": "checkpoints", "mountPath": "/ckpt"}


RUN = run_manifest("default", model=MODEL, rollout=SGLANG)
RUN["metadata"].pop("namespace")
REFUSED = [
    ("no checkpoint volume", {}),
    ("empty volume name", {"checkpoint": {"volume": ""}}),
    ("a path but no volume", {"checkpoint": {"path": "/data/ckpt"}}),
    ("empty sglangUrls", {"rollout": {**SGLANG, "sglangUrls": []}}),
]


@pytest.mark.parametrize(("case", "spec"), REFUSED, ids=[r[0] for r in REFUSED])
def test_sglang_without_a_shareable_checkpoint_volume_is_refused_naming_the_field(
    cluster, crds, case, spec
):
    manifest = json.loads(json.dumps(RUN))
    manifest["spec"].update(spec)
    proc = dry_run(cluster, manifest)
    assert proc.returncode != 0, f"{case}: accepted"
    assert "spec.checkpoint.volume: Invalid value" in proc.stderr, proc.stderr
    assert "an emptyDir is not shared between pods" in proc.stderr


ACCEPTED = [
    ("operator-run sglang with a PVC", {"checkpoint": CKPT}),
    # The user runs these servers and owns what they mount (docs/distributed-training.md).
    ("user-run sglangUrls", {"rollout": {**SGLANG, "sglangUrls": ["http://sglang.team:30000"]}}),
    ("embedded engine in an emptyDir", {"rollout": {"engine": "hf"}}),
]


@pytest.mark.parametrize(("case", "spec"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_runs_whose_weights_need_no_shared_volume_are_accepted(cluster, crds, case, spec):
    manifest = json.loads(json.dumps(RUN))
    manifest["spec"].update(spec)
    proc = dry_run(cluster, manifest)
    assert proc.returncode == 0, f"{case}: {proc.stderr}"


def test_removing_the_volume_of_an_sglang_run_is_refused_and_nothing_is_built(
    cluster, kube, operator, namespace
):
    refused = run_manifest(namespace, model=MODEL, rollout=SGLANG)
    proc = cluster.kubectl(
        "create", "-n", namespace, "-f", "-", input=yaml.safe_dump(refused), check=False
    )
    assert proc.returncode != 0
    assert "spec.checkpoint.volume: Invalid value" in proc.stderr, proc.stderr
    assert kube.get("TrainingRun", namespace, "qwen") is None
    assert kube.get("Deployment", namespace, "qwen-sglang") is None
    kube.create(run_manifest(namespace, model=MODEL, rollout=SGLANG, checkpoint=CKPT))
    patch = json.dumps({"spec": {"checkpoint": {"volume": None}}})
    proc = cluster.kubectl(
        "patch", "trainingrun", "qwen", "-n", namespace, "--type=merge", "-p", patch, check=False
    )
    assert proc.returncode != 0
    assert "spec.checkpoint.volume: Invalid value" in proc.stderr, proc.stderr
    assert kube.get("TrainingRun", namespace, "qwen")["spec"]["checkpoint"]["volume"] == "run-ckpt"


def test_a_stored_run_that_predates_the_rule_fails_saying_why_and_builds_nothing():
    """Runs stored before the CEL rule existed (it is not re-checked on unchanged objects): the
    operator's own check makes them Failed with the same message, and no child is built."""
    spec = {"model": {"path": "/m/x"}, "sandboxes": {"urls": ["http://d:1"]},
            "tasks": {"path": "/t"}, "rollout": {"engine": "sglang"}, "steps": 3}  # fmt: skip
    run = {"metadata": {"name": "old", "namespace": "ns", "generation": 1}, "spec": spec}
    reason = reconcile.invalid_reason(parse(run).spec)
    assert reason.startswith("spec.checkpoint.volume: engine sglang without")
    seen = status.Observed(job=None, ready_sandboxes=None, invalid=reason)
    st = status.compute_run_status(run, parse(run).spec, seen, "2026-01-01T00:00:00Z")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert (st["phase"], failed["status"], failed["reason"]) == ("Failed", "True", "InvalidSpec")
    assert failed["message"] == reason
    run["spec"]["checkpoint"] = {"volume": "c"}
    assert reconcile.invalid_reason(parse(run).spec) == ""
