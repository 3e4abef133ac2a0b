"""An operator killed in the middle of a reconcile leaves no duplicates and no orphans."""

from __future__ import annotations

from .conftest import wait_until
from .helpers import pool_manifest, sandbox_pods, wait_pool


def test_killed_operator_resumes_without_duplicates_or_orphans(kube, operator, namespace):
    kube.create(pool_manifest("big", namespace, 12))
    # Kill while the pool is still being created (the burst of 4 makes this take several passes).
    wait_until(lambda: 0 < len(sandbox_pods(kube, namespace, "big")) < 12, 60, "a partial pool")
    operator.restart(kill=True)
    wait_pool(kube, namespace, "big", ready=12, total=12, timeout=120)
    pods = sandbox_pods(kube, namespace, "big")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"big-{i}" for i in range(12))
    services = kube.list("Service", namespace, "kubecua.dev/pool=big")
    assert sorted(s["metadata"]["name"] for s in services) == sorted(f"big-{i}" for i in range(12))
    pool_uid = kube.get("SandboxPool", namespace, "big")["metadata"]["uid"]
    for obj in pods + services:
        owners = obj["metadata"]["ownerReferences"]
        assert [o["uid"] for o in owners] == [pool_uid]
    secrets = kube.list("Secret", namespace, "kubecua.dev/pool=big")
    token = f"big-sandbox-token-{pool_uid.replace('-', '')[:10]}"
    assert [s["metadata"]["name"] for s in secrets] == [token]
