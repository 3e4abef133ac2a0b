"""Pod backend on the real control plane: scaling, replacement, readiness gating, churn guard."""

from __future__ import annotations

import json

from .conftest import wait_until
from .helpers import (
    condition,
    mark_pod_unready,
    pool_manifest,
    pool_status,
    sandbox_pods,
    set_pod_status,
    wait_pool,
)


def test_pool_scales_up_and_down_with_services_and_token(cluster, kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 3))
    st = wait_pool(kube, namespace, "desks", ready=3, total=3)
    assert condition(st, "Ready")["status"] == "True"
    assert st["selector"] == "kubecua.dev/pool=desks,app.kubernetes.io/component=sandbox"
    pods = sandbox_pods(kube, namespace, "desks")
    assert sorted(p["metadata"]["name"] for p in pods) == ["desks-0", "desks-1", "desks-2"]
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "SandboxPool" for p in pods)
    services = kube.list("Service", namespace, "kubecua.dev/pool=desks")
    assert sorted(s["metadata"]["name"] for s in services) == ["desks-0", "desks-1", "desks-2"]
    uid = kube.get("SandboxPool", namespace, "desks")["metadata"]["uid"].replace("-", "")
    assert kube.get("Secret", namespace, f"desks-sandbox-token-{uid[:10]}")["data"]["token"]
    policy = kube.get("NetworkPolicy", namespace, "desks-sandboxes")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy.get("egress", []) == []  # no rules: all egress denied

    cluster.kubectl("scale", "sandboxpool/desks", "-n", namespace, "--replicas=5")
    wait_pool(kube, namespace, "desks", ready=5, total=5)
    cluster.kubectl("scale", "sandboxpool/desks", "-n", namespace, "--replicas=2")
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    names = sorted(p["metadata"]["name"] for p in sandbox_pods(kube, namespace, "desks"))
    assert names == ["desks-0", "desks-1"]  # idle pool: highest indexes go first
    wait_until(lambda: len(kube.list("Service", namespace, "kubecua.dev/pool=desks")) == 2, 30)
    printed = cluster.kubectl("get", "sbp", "desks", "-n", namespace, "--no-headers").stdout
    assert printed.split()[1:5] == ["pod", "2", "2", "2"]


def test_deleted_sandbox_pod_is_replaced(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    old = kube.get("Pod", namespace, "desks-1")
    kube.delete("Pod", namespace, "desks-1")

    def replaced() -> bool:
        pod = kube.get("Pod", namespace, "desks-1")
        return bool(pod and pod["metadata"]["uid"] != old["metadata"]["uid"])

    wait_until(replaced, 60, "a new desks-1")
    wait_pool(kube, namespace, "desks", ready=2, total=2)


def test_failed_sandbox_is_replaced_with_backoff_and_degraded_condition(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    old = kube.get("Pod", namespace, "desks-0")
    set_pod_status(kube, namespace, "desks-0", {"phase": "Failed", "reason": "DesktopCrashed"})
    wait_until(
        lambda: condition(pool_status(kube, namespace, "desks"), "Degraded").get("status")
        == "True",
        30,
        "Degraded=True",
    )

    def replaced() -> bool:
        pod = kube.get("Pod", namespace, "desks-0")
        return bool(pod and pod["metadata"]["uid"] != old["metadata"]["uid"])

    wait_until(replaced, 60, "a replacement for the failed desks-0")
    st = wait_pool(kube, namespace, "desks", ready=2, total=2)
    assert condition(st, "Degraded")["status"] == "False"
    wanted = {"SandboxesFailed", "SandboxesCreated"}
    wait_until(lambda: wanted <= {e["reason"] for e in kube.list("Event", namespace)}, 30)


def test_readiness_gates_ready_replicas_and_endpoints(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    mark_pod_unready(kube, namespace, "desks-1")  # e.g. /readyz says the screen is black
    st = wait_pool(kube, namespace, "desks", ready=1, total=2)
    assert condition(st, "Ready")["status"] == "False"
    assert condition(st, "Ready")["message"] == "1/2 sandboxes ready"

    def endpoint_ready() -> bool | None:
        slices = kube.list("EndpointSlice", namespace, "kubernetes.io/service-name=desks-1")
        eps = [e for s in slices for e in s.get("endpoints") or []]
        return None if not eps else eps[0]["conditions"].get("ready")

    wait_until(lambda: endpoint_ready() is False, 30, "desks-1's endpoint to turn unready")


def test_unschedulable_pool_holds_with_scaling_limited(kube, operator, namespace):
    huge = {"pod": {"resources": {"requests": {"cpu": "100000"}}}}
    kube.create(pool_manifest("stuck", namespace, 20, desktop=huge))
    st = wait_until(
        lambda: (s := pool_status(kube, namespace, "stuck"))
        and condition(s, "ScalingLimited").get("status") == "True"
        and s,
        60,
        "ScalingLimited=True",
    )
    assert condition(st, "ScalingLimited")["reason"] == "Unschedulable"
    passes = operator.reconciles("SandboxPool")
    wait_until(lambda: operator.reconciles("SandboxPool") >= passes + 3, 30, "3 more passes")
    pods = sandbox_pods(kube, namespace, "stuck")
    assert len(pods) == 4  # the test operator's burst; nothing more while none schedules
    assert pool_status(kube, namespace, "stuck")["readyReplicas"] == 0
    events = wait_until(
        lambda: [e for e in kube.list("Event", namespace) if e["reason"] == "Unschedulable"], 30
    )
    assert events[0]["type"] == "Warning"
    assert json.dumps(events[0]["involvedObject"]).count("stuck") == 1
