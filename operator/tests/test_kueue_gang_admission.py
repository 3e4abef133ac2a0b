"""TrainingRuns queued by Kueue's real controller (kubecua_testkit.kueue: built from the Go module
proxy, run as a local process with its webhooks, against this cluster's API server).

A ClusterQueue holds 2 GPUs. A 2-node run asks for 1 GPU per trainer pod, so one run fills it:
Kueue admits its Workload whole (both pods or none), and a second run waits with Kueue's reason
until the first finishes. The trainer pods ask for more memory than any kwok node has, so kwok
never runs (and completes) them; the test writes their phase as a kubelet would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubecua_operator.k8s import Kube
from kubecua_operator.trainingrun.model import parse
from kubecua_operator.trainingrun.status import (
    JobView,
    Observed,
    compute_run_status,
    summarize_workload,
)
from kubecua_testkit.kueue import Kueue

from .conftest import wait_until
from .helpers import condition, live, pool_manifest, set_pod_status, wait_pool

Obj = dict[str, Any]
QUEUE = "gpu"
QUOTA = {"cpu": "4", "memory": "1000Ti", "nvidia.com/gpu": "2"}
# 1 GPU and 1 CPU per pod count against the quota; 100Ti of memory fits no kwok node
TRAINER = {
    "nodes": 2,
    "gpusPerNode": 1,
    "resources": {"requests": {"cpu": "1", "memory": "100Ti"}},
}
READY = [{"type": t, "status": "True"} for t in ("PodScheduled", "Ready", "ContainersReady")]


@pytest.fixture(scope="module")
def kueue(cluster: Any, crds: None, tmp_path_factory: Any) -> Iterator[Kueue]:
    k = Kueue(cluster, tmp_path_factory.mktemp("kueue"))
    try:
        k.start()
        yield k
    finally:
        k.stop()


@pytest.fixture
def queue(cluster: Any, kueue: Kueue, namespace: str) -> Iterator[str]:
    """A ClusterQueue of its own (cluster-scoped) and the LocalQueue `gpu` in the namespace."""
    name = f"gpu-{namespace}"
    kueue.apply_queues(name, namespace, QUEUE, QUOTA)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "clusterqueue", name, "--wait=false", check=False)


def queued_run(namespace: str, name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"path": "/models/tiny"},
            "sandboxes": {"poolRef": "desks", "minReady": 2},
            "tasks": {"configMapRef": "osworld"},
            "steps": 20,
            "trainer": TRAINER,
            "kueue": {"queueName": QUEUE},
            **spec,
        },
    }


def run_status(kube: Kube, namespace: str, name: str) -> Obj:
    return (kube.get("TrainingRun", namespace, name) or {}).get("status") or {}


def pods_of(kube: Kube, namespace: str, run: str) -> list[Obj]:
    return live(kube.list("Pod", namespace, f"kubecua.dev/trainingrun={run}"))


def workload_of(kube: Kube, namespace: str, run: str) -> Obj:
    job = kube.get("Job", namespace, f"{run}-trainer") or {}
    uid = job.get("metadata", {}).get("uid", "none")
    found = kube.list("Workload", namespace, f"kueue.x-k8s.io/job-uid={uid}")
    return found[0] if found else {}


def wait_admitted(kube: Kube, namespace: str, run: str) -> list[Obj]:
    """Both trainer pods exist (the gang), and the run shows Kueue's admission."""
    pods = wait_until(lambda: (p := pods_of(kube, namespace, run)) and len(p) == 2 and p, 60,
                      f"{run}: 2 trainer pods")  # fmt: skip
    st = wait_until(
        lambda: condition(s := run_status(kube, namespace, run), "Admitted").get("status") == "True"
        and s,
        30,
        f"{run}: Admitted",
    )
    assert condition(st, "Admitted")["reason"] == "Admitted"
    return pods


def mark(kube: Kube, namespace: str, pods: list[Obj], status: Obj) -> None:
    for pod in pods:
        set_pod_status(kube, namespace, pod["metadata"]["name"], status)


def start_pool(kube: Kube, namespace: str) -> None:
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)


def test_a_multi_node_run_is_admitted_whole_and_a_second_waits_for_quota(
    kube, operator, namespace, queue
):
    start_pool(kube, namespace)
    kube.create(queued_run(namespace, "first"))
    first = wait_admitted(kube, namespace, "first")
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                  for p in first) == ["0", "1"]  # fmt: skip
    assert all(
        c["resources"]["limits"]["nvidia.com/gpu"] in (1, "1")
        for p in first
        for c in p["spec"]["containers"]
        if c["name"] == "trainer"
    )
    mark(kube, namespace, first, {"phase": "Running", "conditions": READY})
    wait_until(lambda: run_status(kube, namespace, "first").get("phase") == "Running", 30,
               "first Running")  # fmt: skip
    wl = workload_of(kube, namespace, "first")
    assert wl["status"]["admission"]["clusterQueue"] == queue
    assert wl["spec"]["podSets"][0]["count"] == 2  # one Workload for both pods: the gang

    # The second run does not fit: Kueue keeps its Job suspended and says why.
    kube.create(queued_run(namespace, "second"))

    def waiting() -> Obj | None:
        st = run_status(kube, namespace, "second")
        adm = condition(st, "Admitted")
        return st if adm.get("status") == "False" and "insufficient" in adm["message"] else None

    st = wait_until(waiting, 60, "second: Admitted False with Kueue's reason")
    adm = condition(st, "Admitted")
    assert adm["reason"] == "Pending"  # Kueue's reason for a Workload without quota
    assert "nvidia.com/gpu" in adm["message"], adm
    assert st["phase"] == "Pending"
    assert condition(st, "Progressing")["reason"] == "WaitingForAdmission"
    assert kube.get("Job", namespace, "second-trainer")["spec"]["suspend"] is True
    assert pods_of(kube, namespace, "second") == []  # none of the gang started

    # The first finishes: its quota goes back, and the second starts, whole.
    mark(kube, namespace, first, {"phase": "Succeeded"})
    wait_until(lambda: run_status(kube, namespace, "first").get("phase") == "Succeeded", 60,
               "first Succeeded")  # fmt: skip
    second = wait_admitted(kube, namespace, "second")
    assert len(second) == 2
    assert kube.get("Job", namespace, "second-trainer")["spec"]["suspend"] is False


def test_suspend_and_resume_through_the_run_under_kueue(kube, operator, namespace, queue):
    start_pool(kube, namespace)
    kube.create(queued_run(namespace, "paused"))
    pods = wait_admitted(kube, namespace, "paused")
    mark(kube, namespace, pods, {"phase": "Running", "conditions": READY})

    kube.patch("TrainingRun", namespace, "paused", {"spec": {"suspend": True}})
    # The operator deactivates the Workload; Kueue evicts it and suspends the Job itself.
    wait_until(lambda: workload_of(kube, namespace, "paused")["spec"].get("active") is False, 30,
               "Workload deactivated")  # fmt: skip
    wait_until(lambda: kube.get("Job", namespace, "paused-trainer")["spec"]["suspend"] is True,
               30, "Job suspended by Kueue")  # fmt: skip
    wait_until(lambda: not pods_of(kube, namespace, "paused"), 60, "trainer pods removed")
    st = wait_until(lambda: (s := run_status(kube, namespace, "paused")).get("phase")
                    == "Suspended" and condition(s, "Admitted").get("status") == "False" and s,
                    30, "Suspended, not admitted")  # fmt: skip
    assert condition(st, "Admitted")["reason"] != "Admitted"
    # Suspended, it holds no quota; resumed, Kueue admits it again.
    wait_until(lambda: not workload_of(kube, namespace, "paused")["status"].get("admission"), 30,
               "quota released")  # fmt: skip
    kube.patch("TrainingRun", namespace, "paused", {"spec": {"suspend": False}})
    pods = wait_admitted(kube, namespace, "paused")
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["KUBECUA_RESUME"] == "latest"  # the trainer picks up its checkpoint
    mark(kube, namespace, pods, {"phase": "Running", "conditions": READY})
    wait_until(lambda: run_status(kube, namespace, "paused").get("phase") == "Running", 30,
               "Running again")  # fmt: skip


def workload(conditions: list[Obj], active: bool = True) -> Obj:
    return {"metadata": {"name": "job-x-1"}, "spec": {"active": active},
            "status": {"conditions": conditions}}  # fmt: skip


def test_a_workload_without_quota_shows_kueues_reason_and_message():
    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
               "message": "couldn't assign flavors to pod set main: insufficient unused quota "
               "for nvidia.com/gpu in flavor default-flavor, 2 more needed"}  # fmt: skip
    got = summarize_workload(workload([pending]))
    assert (got.admitted, got.reason, got.active) == (False, "Pending", True)
    assert got.message == pending["message"]
    run = queued_run("ns", "r")
    seen = Observed(job=JobView(name="r-trainer", uid="u", suspend=True), ready_sandboxes=2,
                    admission=got)  # fmt: skip
    st = compute_run_status(run, parse(run).spec, seen, "2026-11-25T00:00:00Z")
    assert st["phase"] == "Pending"
    assert condition(st, "Admitted")["reason"] == "Pending"
    assert condition(st, "Admitted")["message"] == f"Workload job-x-1: {pending['message']}"
    assert condition(st, "Progressing")["reason"] == "WaitingForAdmission"


def test_an_admitted_or_deactivated_workload_says_so():
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"}
    assert summarize_workload(workload([admitted])).admitted is True
    evicted = {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "off"}
    got = summarize_workload(workload([evicted], active=False))
    assert (got.admitted, got.reason, got.active) == (False, "Deactivated", False)
    # no conditions yet: Kueue has not looked at it
    assert summarize_workload(workload([])).reason == "Pending"
