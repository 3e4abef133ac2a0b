"""Small helpers shared by the cluster tests: manifests, reads and simulated kubelet writes."""

from __future__ import annotations

from typing import Any

from kubecua_operator.k8s import Kube

from .conftest import wait_until

Obj = dict[str, Any]


def pool_manifest(name: str, namespace: str, replicas: int, **spec: Any) -> Obj:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "backend": "pod", **spec},
    }


def pool_status(kube: Kube, namespace: str, name: str) -> Obj:
    return (kube.get("SandboxPool", namespace, name) or {}).get("status") or {}


def condition(obj_status: Obj, ctype: str) -> Obj:
    return next((c for c in obj_status.get("conditions") or [] if c["type"] == ctype), {})


def live(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if not o["metadata"].get("deletionTimestamp")]


def sandbox_pods(kube: Kube, namespace: str, pool: str) -> list[Obj]:
    return live(kube.list("Pod", namespace, f"kubecua.dev/pool={pool}"))


def wait_pool(
    kube: Kube, namespace: str, name: str, ready: int, total: int | None = None, timeout: float = 90
) -> Obj:
    """Until status says `ready` ready and (if given) `total` sandboxes exist as live pods."""

    def check() -> Obj | None:
        st = pool_status(kube, namespace, name)
        if st.get("readyReplicas") != ready:
            return None
        if total is not None and (
            st.get("replicas") != total or len(sandbox_pods(kube, namespace, name)) != total
        ):
            return None
        return st

    return wait_until(check, timeout, f"pool {name}: {ready} ready of {total}")


def set_pod_status(kube: Kube, namespace: str, name: str, status: Obj) -> None:
    """Write pod status as a kubelet would (kwok nodes have no kubelet)."""
    kube.patch("Pod", namespace, name, {"status": status}, sub="status")


def mark_pod_unready(kube: Kube, namespace: str, name: str) -> None:
    """What a failing /readyz probe does: the Ready condition turns False."""
    pod = kube.get("Pod", namespace, name) or {}
    conds = [
        {**c, "status": "False"} if c["type"] in ("Ready", "ContainersReady") else c
        for c in pod["status"]["conditions"]
    ]
    set_pod_status(kube, namespace, name, {"conditions": conds})
