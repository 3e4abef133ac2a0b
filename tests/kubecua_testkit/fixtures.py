"""pytest plugin: `pytest_plugins = ["kubecua_testkit.fixtures"]` in a conftest.py.

- `cluster` (session): a ready local control plane with 3 kwok nodes. Each pytest session gets
  its own cluster (name keyed by pid) and deletes it at the end, so suites never share state.
  Set KUBECUA_KUBECONFIG to run against an existing cluster instead (it is left running).
- `real_node_cluster` (session): another local control plane, with a real node (containerd,
  kubelet, kube-proxy; kubecua_testkit.node) beside one tainted kwok node, and kubecua's podman
  images imported into the node. Stopped and deleted at the end, failures included.
- `namespace` (function): a fresh namespace, deleted after the test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from kubecua_testkit.cluster import Cluster, down, up


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    existing = os.environ.get("KUBECUA_KUBECONFIG")
    if existing:
        yield Cluster(name="external", kubeconfig=Path(existing))
        return
    name = f"kubecua-test-{os.getpid()}"
    c = up(name, nodes=3)
    try:
        yield c
    finally:
        down(name)


@pytest.fixture(scope="session")
def real_node_cluster() -> Iterator[Cluster]:
    name = f"kubecua-real-{os.getpid()}"
    try:
        c = up(name, nodes=1, real_node=True)
        yield c
    finally:
        down(name)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
