"""What the real-node test modules (tests/e2e/test_real_node_*.py) share: a pod's readiness, the
images the node holds, and the figures file each module writes under $KUBECUA_CACHE/node."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from kubecua_testkit import node as real
from kubecua_testkit.cluster import Cluster
from kubecua_testkit.tools import cache_dir


def pod_ready(pod: Any) -> bool:
    conds = pod.status.conditions or []
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in conds
    )


def node_images(cluster: Cluster) -> set[str]:
    """Every tag in the real node's image store, as the kubelet reports it."""
    node = client.CoreV1Api(cluster.api_client()).read_node(real.NAME)
    return {tag for image in node.status.images or [] for tag in image.names or []}


class Figures(dict[str, Any]):
    """A module's timings and records, rewritten to $KUBECUA_CACHE/node/<name>.json at every
    record, so what a run measured survives a later failure."""

    def __init__(self, name: str, digits: int = 1) -> None:
        super().__init__()
        self.path = cache_dir() / "node" / f"{name}.json"
        self.digits = digits

    def record(self, key: str, value: Any) -> None:
        self[key] = round(value, self.digits) if isinstance(value, float) else value
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self, indent=1))
