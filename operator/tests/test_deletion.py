"""Deletion never waits for the operator (issue 13, finding 10). kopf daemons put a finalizer on
every pool and run, so with the operator down a namespace stayed Terminating and `kubectl delete
crd` (helm uninstall with crds.keep=false) hung. Owner references already clean up every child;
the operator now runs its loops from watch events and adds no finalizer.
"""

from __future__ import annotations

import time
import uuid

from kubernetes import client

from .conftest import REPO, wait_until
from .helpers import pool_manifest, wait_pool
from .test_trainingrun_lifecycle import run_manifest

CRDS = ["crd/sandboxpools.kubecua.dev", "crd/trainingruns.kubecua.dev"]


def test_namespace_is_deleted_while_the_operator_is_down(cluster, kube, operator):
    core = client.CoreV1Api(cluster.api_client())
    namespace = f"t-del-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    kube.create(pool_manifest("desks", namespace, 2))
    kube.create(run_manifest(namespace))
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    for kind, name in (("SandboxPool", "desks"), ("TrainingRun", "qwen")):
        assert not kube.get(kind, namespace, name)["metadata"].get("finalizers")
    operator.stop()
    try:
        started = time.monotonic()
        core.delete_namespace(namespace)

        def gone() -> bool:
            return not any(n.metadata.name == namespace for n in core.list_namespace().items)

        wait_until(gone, 120, f"namespace {namespace} deleted")
        print(f"namespace deleted, operator down: {time.monotonic() - started:.1f}s")
    finally:
        operator.start()


def test_crds_are_deleted_with_their_objects_while_the_operator_is_down(
    cluster, kube, operator, namespace
):
    kube.create(pool_manifest("desks", namespace, 1))
    kube.create(run_manifest(namespace))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    operator.stop()
    try:
        started = time.monotonic()
        out = cluster.kubectl("delete", *CRDS, "--timeout=90s")
        assert out.stdout.count("deleted") == 2
        print(f"CRDs deleted with their objects, operator down: {time.monotonic() - started:.1f}s")
    finally:
        cluster.kubectl("apply", "-f", str(REPO / "crds"))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *CRDS)
        operator.start()
