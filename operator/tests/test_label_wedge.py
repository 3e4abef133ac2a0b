"""One label edit never wedges a pool (issue 13, finding 7). A sandbox pod whose kubecua.dev/pool
label was removed drops out of the operator's index; creating it again answers 409. Before, that
409 counted as success: every pass "created 1 sandboxes" (an Event each time) and the pool sat one
short forever. Now the operator reads the object: if the pool controls it, its labels are put back
(adopted); if not, the index is skipped and the object is never deleted or counted.
"""

from __future__ import annotations

import re
import time

from .conftest import wait_until
from .helpers import pool_manifest, pool_status, wait_pool


def created_events(kube, namespace: str, pool: str) -> int:
    """Sandboxes announced by SandboxesCreated Events ("created N sandboxes")."""
    total = 0
    for ev in kube.list("Event", namespace):
        if ev["involvedObject"]["name"] == pool and ev["reason"] == "SandboxesCreated":
            total += int(re.match(r"created (\d+) sandboxes", ev["message"]).group(1))
    return total


def owned_pods(kube, namespace: str, pool: str) -> list[dict]:
    uid = kube.get("SandboxPool", namespace, pool)["metadata"]["uid"]
    return [
        p
        for p in kube.list("Pod", namespace)
        if any(o["uid"] == uid for o in p["metadata"].get("ownerReferences") or [])
        and not p["metadata"].get("deletionTimestamp")
    ]


def test_sandbox_without_its_pool_label_is_adopted_not_recreated(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 3))
    wait_pool(kube, namespace, "desks", ready=3, total=3)
    uid = kube.get("Pod", namespace, "desks-1")["metadata"]["uid"]
    started = time.monotonic()
    kube.patch("Pod", namespace, "desks-1", {"metadata": {"labels": {"kubecua.dev/pool": None}}})

    def relabelled() -> bool:
        pod = kube.get("Pod", namespace, "desks-1")
        return (
            pod["metadata"]["uid"] == uid
            and pod["metadata"]["labels"].get("kubecua.dev/pool") == "desks"
        )

    wait_until(relabelled, 30, "desks-1 adopted back")
    print(f"label removed, sandbox adopted back: {time.monotonic() - started:.1f}s")
    wait_pool(kube, namespace, "desks", ready=3, total=3)
    names = sorted(p["metadata"]["name"] for p in owned_pods(kube, namespace, "desks"))
    assert names == ["desks-0", "desks-1", "desks-2"]
    assert created_events(kube, namespace, "desks") == 3  # no false "created" Events


def test_foreign_pod_with_a_pools_labels_is_neither_counted_nor_deleted(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    labels = {
        "kubecua.dev/pool": "desks",
        "kubecua.dev/sandbox": "desks-1",
        "kubecua.dev/role": "episode-server",
        "app.kubernetes.io/component": "sandbox",
    }
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "desks-1", "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "someone/else"}]},
    }
    kube.create(foreign)
    foreign_uid = kube.get("Pod", namespace, "desks-1")["metadata"]["uid"]
    kube.patch("SandboxPool", namespace, "desks", {"spec": {"replicas": 3}})
    wait_until(
        lambda: pool_status(kube, namespace, "desks").get("readyReplicas") == 3
        and len(owned_pods(kube, namespace, "desks")) == 3,
        60,
        "3 sandboxes of the pool's own",
    )
    assert sorted(p["metadata"]["name"] for p in owned_pods(kube, namespace, "desks")) == [
        "desks-0",
        "desks-2",
        "desks-3",
    ]
    assert pool_status(kube, namespace, "desks")["replicas"] == 3
    kube.patch("SandboxPool", namespace, "desks", {"spec": {"replicas": 0}})
    wait_until(lambda: not owned_pods(kube, namespace, "desks"), 60, "the pool scaled to 0")
    assert kube.get("Pod", namespace, "desks-1")["metadata"]["uid"] == foreign_uid
    assert kube.get("Service", namespace, "desks-1") is None
