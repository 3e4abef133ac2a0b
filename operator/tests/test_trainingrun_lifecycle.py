"""TrainingRun on the real control plane: children, waiting for sandboxes, trainer status
patches, suspend/resume, success, failure with backoff.

kwok completes every Job pod it schedules at once (its pod-complete stage), which plays a trainer
that finishes. Tests that need a trainer to stay up give it an unschedulable CPU request, so kwok
never touches its pods, and write the pods' phase themselves, as a kubelet would.
"""

from __future__ import annotations

from typing import Any

from kubecua_operator.k8s import Kube
from kubecua_operator.trainingrun.job import INDEX_ANNOTATION

from .conftest import wait_until
from .helpers import condition, live, pool_manifest, set_pod_status, wait_pool


def run_manifest(namespace: str, **spec: Any) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "qwen", "namespace": namespace},
        "spec": {
            "model": {"path": "/models/tiny"},
            "sandboxes": {"poolRef": "desks", "minReady": 2},
            "tasks": {"configMapRef": "osworld"},
            "steps": 20,
            "backoffLimit": 1,
            **spec,
        },
    }


def run_status(kube: Kube, namespace: str) -> dict:
    return (kube.get("TrainingRun", namespace, "qwen") or {}).get("status") or {}


def wait_phase(kube: Kube, namespace: str, phase: str, timeout: float = 60) -> dict:
    return wait_until(
        lambda: (st := run_status(kube, namespace)).get("phase") == phase and st,
        timeout,
        f"phase {phase}",
    )


def trainer_pods(kube: Kube, namespace: str) -> list[dict]:
    return live(kube.list("Pod", namespace, "kubecua.dev/trainingrun=qwen"))


OFF_NODES = {"resources": {"requests": {"cpu": "100000"}}}  # no kwok node fits: kwok leaves it


def run_trainer_pods(kube: Kube, namespace: str, count: int) -> list[dict]:
    """Wait for `count` pending trainer pods and mark them Running and Ready (kubelet's part)."""

    def pending() -> list[dict] | None:
        pods = [p for p in trainer_pods(kube, namespace) if p["status"].get("phase") == "Pending"]
        return pods if len(pods) == count else None

    pods = wait_until(pending, 60, f"{count} pending trainer pods")
    ready = [{"type": t, "status": "True"} for t in ("PodScheduled", "Ready", "ContainersReady")]
    for pod in pods:
        set_pod_status(
            kube, namespace, pod["metadata"]["name"], {"phase": "Running", "conditions": ready}
        )
    return pods


def start_run(kube: Kube, namespace: str, **spec: Any) -> list[dict]:
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    kube.create(run_manifest(namespace, trainer=OFF_NODES, **spec))
    pods = run_trainer_pods(kube, namespace, 1)
    wait_phase(kube, namespace, "Running")
    return pods


def test_run_waits_for_sandboxes_then_creates_its_children(cluster, kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 1))
    kube.create(run_manifest(namespace, trainer={"nodes": 2}))
    st = wait_until(lambda: (s := run_status(kube, namespace)).get("readySandboxes") == 1 and s, 60)
    assert st["phase"] == "Pending"
    assert condition(st, "SandboxesReady")["reason"] == "WaitingForSandboxes"
    assert kube.get("Job", namespace, "qwen-trainer") is None
    for kind, name in [
        ("ConfigMap", "qwen-config"),
        ("ServiceAccount", "qwen-trainer"),
        ("Role", "qwen-trainer"),
        ("RoleBinding", "qwen-trainer"),
        ("Service", "qwen-trainer"),
        ("Service", "qwen-metrics"),
    ]:
        obj = kube.get(kind, namespace, name)
        assert obj, f"{kind} {name} missing"
        assert obj["metadata"]["ownerReferences"][0]["name"] == "qwen"
    assert kube.get("Service", namespace, "qwen-trainer")["spec"]["clusterIP"] == "None"

    cluster.kubectl("scale", "sbp/desks", "-n", namespace, "--replicas=2")
    job = wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == 2
    # kwok runs both pods to completion at once: the run ends as a trainer that finished would.
    st = wait_phase(kube, namespace, "Succeeded")
    assert condition(st, "SandboxesReady")["status"] == "True"
    assert st["completionTime"]
    pods = trainer_pods(kube, namespace)
    ranks = sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
    )
    assert ranks == ["0", "1"]
    assert {p["metadata"]["labels"]["kubecua.dev/client-of-desks"] for p in pods} == {"true"}


def test_trainer_status_patches_are_kept_and_printed(cluster, kube, operator, namespace):
    start_run(kube, namespace)
    # What kubecua_trainer.telemetry.status does from outside the cluster: a merge patch of its
    # own fields.
    progress = {
        "step": 7,
        "totalSteps": 20,
        "meanReward": 0.375,
        "successRate": 0.25,
        "tokensPerSecond": 812.5,
        "lastCheckpoint": {"step": 5, "path": "/ckpt/step-5", "time": "2026-11-21T03:00:00Z"},
    }
    kube.patch("TrainingRun", namespace, "qwen", {"status": progress}, sub="status")
    passes = operator.reconciles("TrainingRun")
    wait_until(lambda: operator.reconciles("TrainingRun") >= passes + 2, 30, "2 more passes")
    st = run_status(kube, namespace)
    assert {k: st[k] for k in progress} == progress
    assert st["phase"] == "Running"
    row = cluster.kubectl("get", "trun", "qwen", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:7] == ["Running", "desks", "7", "20", "0.375", "0.25"]


def test_suspend_removes_trainer_pods_and_resume_brings_them_back(kube, operator, namespace):
    start_run(kube, namespace)
    kube.patch("TrainingRun", namespace, "qwen", {"spec": {"suspend": True}})
    wait_phase(kube, namespace, "Suspended")
    wait_until(lambda: kube.get("Job", namespace, "qwen-trainer")["spec"]["suspend"] is True, 30)
    wait_until(lambda: not trainer_pods(kube, namespace), 60, "trainer pods removed")
    kube.patch("TrainingRun", namespace, "qwen", {"spec": {"suspend": False}})
    pod = run_trainer_pods(kube, namespace, 1)[0]
    wait_phase(kube, namespace, "Running")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KUBECUA_RESUME"] == "latest"


def test_run_succeeds_when_the_trainer_exits_cleanly(kube, operator, namespace):
    pod = start_run(kube, namespace)[0]
    set_pod_status(kube, namespace, pod["metadata"]["name"], {"phase": "Succeeded"})
    st = wait_phase(kube, namespace, "Succeeded")
    assert st["completionTime"]
    assert condition(st, "Progressing")["status"] == "False"


def exited(code: int) -> dict:
    """A Failed pod's status as a kubelet writes it when the trainer container exits `code`."""
    state = {"terminated": {"exitCode": code, "reason": "Error"}}
    return {"phase": "Failed", "reason": "Error", "containerStatuses": [
        {"name": "trainer", "image": "trainer", "imageID": "", "ready": False,
         "restartCount": 0, "state": state}]}  # fmt: skip


def test_a_trainer_stopped_by_sigterm_is_replaced_without_counting_a_failure(
    kube, operator, namespace
):
    """Exit 143 (an eviction's or a drain's SIGTERM, after the trainer's checkpoint): the real
    Job controller applies the Job's podFailurePolicy, so not even backoffLimit 1's two such stops
    fail or finish the run; a new pod for index 0 resumes it. Exit 1 still counts."""
    pod = start_run(kube, namespace)[0]
    for _ in range(2):
        set_pod_status(kube, namespace, pod["metadata"]["name"], exited(143))
        pod = run_trainer_pods(kube, namespace, 1)[0]  # the replacement
        assert pod["metadata"]["annotations"][INDEX_ANNOTATION] == "0"
    job = kube.get("Job", namespace, "qwen-trainer")
    assert not job["status"].get("failed"), job["status"]
    assert not job["status"].get("succeeded"), job["status"]
    st = run_status(kube, namespace)
    assert st["phase"] not in ("Succeeded", "Failed"), st
    assert not st.get("restarts"), st

    set_pod_status(kube, namespace, pod["metadata"]["name"], exited(1))  # a crashed rank
    wait_until(lambda: run_status(kube, namespace).get("restarts") == 1, 60, "1 counted failure")


def test_trainer_failures_count_against_backoff_limit_then_fail_the_run(kube, operator, namespace):
    pod = start_run(kube, namespace)[0]  # backoffLimit 1: the second failure ends the run
    for attempt in range(2):
        if attempt:
            pod = run_trainer_pods(kube, namespace, 1)[0]
        set_pod_status(
            kube, namespace, pod["metadata"]["name"], {"phase": "Failed", "reason": "Error"}
        )
        if attempt == 0:
            wait_until(lambda: run_status(kube, namespace).get("restarts") == 1, 60, "1 restart")
    st = wait_phase(kube, namespace, "Failed")
    failed = condition(st, "Failed")
    assert failed["status"] == "True"
    assert failed["reason"] == "BackoffLimitExceeded"
    assert st["restarts"] == 2
    warnings = wait_until(  # Events follow the status write
        lambda: [e for e in kube.list("Event", namespace) if e["reason"] == "Failed"], 30
    )
    assert warnings[0]["type"] == "Warning"
    assert warnings[0]["involvedObject"]["name"] == "qwen"
