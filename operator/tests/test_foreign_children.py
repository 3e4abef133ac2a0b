"""Children the operator did not make, and writes it cannot do, are reported, never taken over
(issue 35, findings 4 to 6), with the operator running on the real API server:

- a run whose derived child names are already held by another team's ConfigMap, account and
  NetworkPolicy leaves all three as they were, makes no Job, and says which (Degraded, one
  Event), the rest of its status computed;
- a trainer Job the API server refuses, and a Job whose pods it refuses, are Degraded conditions
  carrying the server's message;
- a pool's NetworkPolicy stripped of both ownership marks is reported, not silently kept; a
  sandbox Service that lost only its owner reference is adopted again; a sandbox Service name
  held by someone else's Service is named.
"""

from __future__ import annotations

import json
from typing import Any

from .conftest import wait_until
from .helpers import condition, pool_manifest, pool_status, wait_pool
from .test_trainingrun_lifecycle import OFF_NODES, run_manifest, run_status

STATIC = {"urls": ["http://10.0.0.9:8000"]}  # sandboxes by URL: the Job needs no pool


def degraded(status: dict[str, Any], reason: str) -> dict[str, Any] | None:
    cond = condition(status, "Degraded")
    return cond if cond.get("status") == "True" and cond.get("reason") == reason else None


def run_degraded(kube: Any, namespace: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    return wait_until(
        lambda: degraded(run_status(kube, namespace), reason), timeout, f"run Degraded/{reason}"
    )


def events_of(kube: Any, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e for e in kube.list("Event", namespace)
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]  # fmt: skip


def test_a_run_leaves_children_someone_else_made_alone_and_names_them(kube, operator, namespace):
    theirs = {"team": "b"}
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "qwen-config", "namespace": namespace, "labels": theirs},
                 "data": {"db": "team-b"}})  # fmt: skip
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "qwen-trainer", "namespace": namespace}})  # fmt: skip
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "qwen-run", "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]},
    }  # fmt: skip
    kube.create(policy)
    kube.create(run_manifest(namespace, sandboxes=STATIC, trainer=OFF_NODES))
    cond = run_degraded(kube, namespace, "ChildNotOwned")
    for kind, name in (("ConfigMap", "qwen-config"), ("ServiceAccount", "qwen-trainer"),
                       ("NetworkPolicy", "qwen-run")):  # fmt: skip
        assert f"{kind} {name} already exists and is not made by the operator" in cond["message"]
        obj = kube.get(kind, namespace, name)
        assert not obj["metadata"].get("ownerReferences"), (kind, obj["metadata"])
    assert kube.get("ConfigMap", namespace, "qwen-config")["data"] == {"db": "team-b"}
    assert kube.get("NetworkPolicy", namespace, "qwen-run")["spec"]["podSelector"] == {
        "matchLabels": {"app": "db"}
    }
    st = run_status(kube, namespace)
    assert st["phase"] == "Pending"
    assert condition(st, "SandboxesReady")["reason"] == "StaticUrls"  # the rest is computed
    assert kube.get("Service", namespace, "qwen-trainer")  # its other children are made...
    assert kube.get("RoleBinding", namespace, "qwen-trainer") is None  # ...but no grant
    assert kube.get("Job", namespace, "qwen-trainer") is None  # never run as their account
    reconciles = operator.reconciles("TrainingRun")
    wait_until(lambda: operator.reconciles("TrainingRun") >= reconciles + 3, 30, "3 more passes")
    assert len(events_of(kube, namespace, "qwen", "ChildNotOwned")) == 1

    # Once they are gone, the run makes its own and starts.
    for kind, name in (("ConfigMap", "qwen-config"), ("ServiceAccount", "qwen-trainer"),
                       ("NetworkPolicy", "qwen-run")):  # fmt: skip
        kube.delete(kind, namespace, name)
    wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    wait_until(lambda: condition(run_status(kube, namespace), "Degraded").get("status") == "False",
               30, "Degraded=False")  # fmt: skip


def quota(cluster: Any, namespace: str, name: str, hard: str) -> None:
    """A ResourceQuota, once the quota controller has counted its use (until then admission
    refuses with another message)."""
    cluster.kubectl("create", "quota", name, f"--hard={hard}", "-n", namespace)

    def counted() -> bool:
        out = cluster.kubectl("get", "quota", name, "-n", namespace, "-o", "json").stdout
        return bool((json.loads(out).get("status") or {}).get("used"))

    wait_until(counted, 30, f"quota {name} counted")


def test_a_refused_trainer_job_or_pod_is_a_condition_with_the_api_message(
    cluster, kube, operator, namespace
):
    # A quota of no Jobs: the API server refuses the trainer Job itself (403).
    quota(cluster, namespace, "no-jobs", "count/jobs.batch=0")
    kube.create(run_manifest(namespace, sandboxes=STATIC, trainer=OFF_NODES))
    cond = run_degraded(kube, namespace, "ChildRefused")
    assert "the API server refused Job qwen-trainer" in cond["message"]
    assert "exceeded quota: no-jobs" in cond["message"]
    st = run_status(kube, namespace)
    assert (st["phase"], condition(st, "Progressing")["reason"]) == ("Pending", "ChildRefused")
    assert condition(st, "SandboxesReady")["status"] == "True"
    assert len(events_of(kube, namespace, "qwen", "ChildRefused")) == 1

    # A quota of no pods instead: the Job is made, and the Job controller's pods are refused.
    quota(cluster, namespace, "no-pods", "pods=0")
    cluster.kubectl("delete", "quota", "no-jobs", "-n", namespace)
    cond = run_degraded(kube, namespace, "TrainerPodsRefused")
    assert "Job qwen-trainer cannot create its pods" in cond["message"]
    assert "exceeded quota: no-pods" in cond["message"]
    assert run_status(kube, namespace)["phase"] == "Pending"
    cluster.kubectl("delete", "quota", "no-pods", "-n", namespace)
    wait_until(lambda: condition(run_status(kube, namespace), "Degraded").get("status") == "False",
               60, "the pods made, Degraded=False")  # fmt: skip


def test_a_pool_reports_children_that_lost_their_marks_and_readopts_marked_orphans(
    kube, operator, namespace
):
    kube.create({"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "desks-1", "namespace": namespace},
                 "spec": {"ports": [{"port": 80}]}})  # fmt: skip
    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    uid = kube.get("SandboxPool", namespace, "desks")["metadata"]["uid"]

    # The sandbox Service loses its owner reference but keeps the pool's labels: adopted again.
    kube.patch("Service", namespace, "desks-0", {"metadata": {"ownerReferences": None}})
    wait_until(
        lambda: [r["uid"] for r in
                 kube.get("Service", namespace, "desks-0")["metadata"].get("ownerReferences") or []]
        == [uid], 30, "the Service re-adopted",
    )  # fmt: skip

    # One edit strips both marks off the pool's NetworkPolicy and opens it: named, not Ready-quiet.
    strip = {
        "metadata": {"ownerReferences": None,
                     "labels": {"app.kubernetes.io/managed-by": None, "kubecua.dev/pool": None}},
        "spec": {"ingress": [{}]},
    }  # fmt: skip
    kube.patch("NetworkPolicy", namespace, "desks-sandboxes", strip)

    def pool_degraded() -> dict[str, Any] | None:
        return degraded(pool_status(kube, namespace, "desks"), "ChildNotOwned")

    cond = wait_until(pool_degraded, 60, "pool Degraded/ChildNotOwned")
    assert (
        "NetworkPolicy desks-sandboxes already exists and is not made by the operator"
        in (cond["message"])
    )
    kube.delete("NetworkPolicy", namespace, "desks-sandboxes")  # the operator makes its own again
    wait_until(lambda: not pool_degraded(), 30, "Degraded cleared")
    assert kube.get("NetworkPolicy", namespace, "desks-sandboxes")["spec"]["ingress"] != [{}]

    # A sandbox whose Service name someone else's Service holds: named.
    kube.patch("SandboxPool", namespace, "desks", {"spec": {"replicas": 2}})
    cond = wait_until(pool_degraded, 60, "the foreign Service named")
    assert "Service desks-1 already exists and is not made by the operator" in cond["message"]
    theirs = kube.get("Service", namespace, "desks-1")
    assert not theirs["metadata"].get("ownerReferences")
    assert theirs["spec"]["ports"][0]["port"] == 80


def test_a_status_written_by_someone_else_is_put_right(kube, operator, namespace):
    """Finding 7: a forged phase and future timestamps persisted until the next transition."""
    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    kube.create(run_manifest(namespace, sandboxes=STATIC, trainer=OFF_NODES))
    wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    wait_until(lambda: run_status(kube, namespace).get("phase") == "Pending", 30, "Pending")
    future = "2099-01-01T00:00:00Z"
    kube.patch("TrainingRun", namespace, "qwen",
               {"status": {"phase": "Succeeded", "startTime": future}}, sub="status")  # fmt: skip
    ready = condition(pool_status(kube, namespace, "desks"), "Ready")
    forged = {"readyReplicas": 9, "conditions": [{**ready, "lastTransitionTime": future}]}
    kube.patch("SandboxPool", namespace, "desks", {"status": forged}, sub="status")

    def run_right() -> bool:
        st = run_status(kube, namespace)
        return st.get("phase") == "Pending" and st.get("startTime", "") < future

    wait_until(run_right, 30, "the run's status put right")
    wait_pool(kube, namespace, "desks", ready=1)
    stamp = condition(pool_status(kube, namespace, "desks"), "Ready")["lastTransitionTime"]
    assert stamp < future
