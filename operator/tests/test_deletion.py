"""Deletion never waits for the operator (issue 13, finding 10). kopf daemons put a finalizer on
every pool and run, so with the operator down a namespace stayed Terminating and `kubectl delete
crd` (helm uninstall with crds.keep=false) hung. Owner references already clean up every child;
the operator now runs its loops from watch events and adds no finalizer.

A pool that someone else's finalizer holds keeps its loop, and its status says it is being
deleted (issue 35, item 7), instead of its last status as a live pool.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from kubecua_testkit.wait import wait_for_objects

from .conftest import REPO, wait_until
from .helpers import condition, pool_manifest, sandbox_pods, wait_pool
from .test_trainingrun_lifecycle import run_manifest

CRDS = ["crd/sandboxpools.kubecua.dev", "crd/trainingruns.kubecua.dev"]
HOLD = "test.kubecua.dev/hold"  # a finalizer of nobody's: holds the pool while being deleted


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


def watch_pool(
    cluster: Any, namespace: str, name: str, until: Callable[[str, dict], bool], timeout: int = 60
) -> dict:
    """List, then watch, one pool until `until(event type, object)` holds ("DELETED" and {} when
    the list finds it gone); returns that object."""
    api = client.CustomObjectsApi(cluster.api_client())
    where = ("kubecua.dev", "v1alpha1", namespace, "sandboxpools")
    listing = api.list_namespaced_custom_object(*where, field_selector=f"metadata.name={name}")
    last: dict = listing["items"][0] if listing["items"] else {}
    if until("ADDED" if last else "DELETED", last):
        return last
    stream = watch.Watch().stream(
        api.list_namespaced_custom_object, *where, field_selector=f"metadata.name={name}",
        resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=timeout,
    )  # fmt: skip
    for event in stream:
        last = event["object"]
        if until(event["type"], last):
            stream.close()
            return last
    raise TimeoutError(f"pool {name}: no such event within {timeout}s (last: {last.get('status')})")


def test_a_pool_held_by_a_finalizer_says_it_is_being_deleted_and_creates_nothing(
    cluster, kube, operator, namespace
):
    manifest = pool_manifest("desks", namespace, 2)
    manifest["metadata"]["finalizers"] = [HOLD]
    kube.create(manifest)
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    kube.delete("SandboxPool", namespace, "desks")
    try:
        st = watch_pool(cluster, namespace, "desks", lambda _t, o: deleting(o))["status"]
        states = {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}
        assert states == {
            "Ready": ("False", "Deleting"),
            "Progressing": ("True", "Deleting"),
            "Degraded": ("False", "NoFailures"),
            "ScalingLimited": ("False", "Deleting"),
            "Deleting": ("True", "WaitingForFinalizers"),
        }
        assert HOLD in condition(st, "Deleting")["message"]
        assert (st["replicas"], st["readyReplicas"]) == (2, 2)  # counted as they are

        # A sandbox lost meanwhile is not replaced: the pass that counts it gone (a live pool's
        # would count its replacement too) leaves the other pod alone.
        before = {p["metadata"]["name"] for p in sandbox_pods(kube, namespace, "desks")}
        lost = sorted(before)[0]
        kube.delete("Pod", namespace, lost)
        st = watch_pool(cluster, namespace, "desks", lambda _t, o: replicas(o) == 1)["status"]
        assert st["readyReplicas"] == 1
        after = {p["metadata"]["name"] for p in sandbox_pods(kube, namespace, "desks")}
        assert after == before - {lost}
    finally:  # a failed test must not leave its namespace stuck on the pool
        kube.patch("SandboxPool", namespace, "desks", {"metadata": {"finalizers": None}})
    watch_pool(cluster, namespace, "desks", lambda event, _o: event == "DELETED")
    wait_for_objects(  # and its children go with it (garbage collection)
        client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
        lambda pods: not pods,
        namespace=namespace,
        label_selector="kubecua.dev/pool=desks",
    )


def deleting(pool: dict) -> bool:
    return condition(pool.get("status") or {}, "Deleting").get("status") == "True"


def replicas(pool: dict) -> int | None:
    return (pool.get("status") or {}).get("replicas")
