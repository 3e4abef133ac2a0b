"""Against the real local control plane: the status patch of a TrainingRun, and the pool source
that watches a SandboxPool's EndpointSlices by label with live readiness, taking only those of
Services the operator made for the pool (issue 42: a label is no proof).

The `cluster` and `namespace` fixtures come from kubecua_testkit (conftest.py registers it)."""

from __future__ import annotations

import asyncio

import pytest
from control_plane import POOL_CRD, install_trainingrun_crd, require_control_plane
from kubernetes import client

from kubecua_trainer.config import load_from_cluster
from kubecua_trainer.sources.kube import PoolSource
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.telemetry.status import (
    GROUP,
    PLURAL,
    VERSION,
    StatusPatcher,
    build_status,
    build_warmup_status,
)

require_control_plane()


@pytest.fixture(scope="module")
def api(cluster):
    install_trainingrun_crd(cluster, POOL_CRD)
    return install_trainingrun_crd(cluster)


def training_run(name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "model": {"path": "/models/m"},
            "sandboxes": {"poolRef": "desktops", "minReady": 1},
            "tasks": {"configMapRef": "tasks"},
            "steps": 5,
        },
    }


def test_status_patch_writes_trainer_fields_and_skips_unchanged(api, namespace) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, training_run("r1"))
    run = load_from_cluster("r1", namespace, api=custom)
    assert run.spec.sandboxes.pool_ref == "desktops"
    assert run.spec.steps == 5
    patcher = StatusPatcher("r1", namespace, api=custom)
    status = build_status(2, 5, 0.25, 0.125, 31.5, (2, "/ckpt/step-000002"))
    assert patcher.patch(status) is True
    assert patcher.patch(status) is False  # unchanged: no request
    got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "r1")["status"]
    assert got["step"] == 2
    assert got["totalSteps"] == 5
    assert got["meanReward"] == 0.25
    assert got["successRate"] == 0.125
    assert got["tokensPerSecond"] == 31.5
    assert got["lastCheckpoint"]["step"] == 2
    assert got["lastCheckpoint"]["path"].endswith("000002")
    assert patcher.patch(build_status(3, 5, 0.5, 0.25, 30.0)) is True
    got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "r1")["status"]
    assert got["step"] == 3
    assert got["lastCheckpoint"]["step"] == 2


def test_the_warm_ups_goal_is_patched_into_status_warmup_as_the_crd_stores_it(
    api, namespace
) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, training_run("w1"))
    goal = {
        "reply_match": 0.125,
        "matched": 12,
        "replies": 96,
        "demonstrations": 32,
        "reply_match_min": 0.6,
        "on_below_goal": "extend",
        "epochs": 120,
        "extended_epochs": 30,
        "below_goal": True,
        "result": "BelowGoalFailed",
        "seconds": 1.2,
    }  # fmt: skip  (warmup.json's "goal", warmup/goal.py record())
    patcher = StatusPatcher("w1", namespace, api=custom)
    assert patcher.patch({"warmup": build_warmup_status(goal)}) is True
    got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "w1")["status"]
    stored = got["warmup"]
    assert stored.pop("time").endswith("Z")
    assert stored == {"epochs": 120, "extendedEpochs": 30, "replyMatch": 0.125, "replies": 96,
                      "goal": 0.6, "belowGoal": True, "result": "BelowGoalFailed"}  # fmt: skip


def test_status_patch_failure_is_not_fatal(api, namespace) -> None:
    patcher = StatusPatcher("missing", namespace, api=client.CustomObjectsApi(api))
    assert patcher.patch(build_status(1, 5, 0.0, 0.0, None)) is False


def endpoint_slice(
    name: str, pool: str, ips: dict[str, bool], owner: client.V1Service | None = None
) -> client.V1EndpointSlice:
    """A slice of Service `name` (controlled by `owner`, as the EndpointSlice controller makes
    them; it copies the Service's labels, so the pool's label too)."""
    refs = None
    if owner is not None:
        meta = owner.metadata
        refs = [client.V1OwnerReference(api_version="v1", kind="Service", controller=True,
                                        name=meta.name, uid=meta.uid)]  # fmt: skip
    return client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"kubecua.dev/pool": pool, "kubernetes.io/service-name": name},
            owner_references=refs,
        ),
        address_type="IPv4",
        ports=[client.DiscoveryV1EndpointPort(name="episodes", port=8000, protocol="TCP")],
        endpoints=[
            client.V1Endpoint(addresses=[ip], conditions=client.V1EndpointConditions(ready=ok))
            for ip, ok in ips.items()
        ],
    )


def sandbox_pool(api, namespace: str, name: str) -> dict:
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxPool",
            "metadata": {"name": name}, "spec": {"replicas": 0, "backend": "pod"}}  # fmt: skip
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "sandboxpools", body)


def service(
    api, namespace: str, name: str, labels: dict[str, str], pool: dict | None = None
) -> client.V1Service:
    """A selectorless Service (its slices are the test's), controlled by `pool` if given."""
    refs = None
    if pool is not None:
        meta = pool["metadata"]
        refs = [client.V1OwnerReference(api_version=f"{GROUP}/{VERSION}", kind="SandboxPool",
                                        name=meta["name"], uid=meta["uid"],
                                        controller=True)]  # fmt: skip
    body = client.V1Service(
        metadata=client.V1ObjectMeta(name=name, labels=labels, owner_references=refs),
        spec=client.V1ServiceSpec(cluster_ip="None", ports=[client.V1ServicePort(port=8000)]),
    )
    return client.CoreV1Api(api).create_namespaced_service(namespace, body)


def operator_labels(pool: str, sandbox: str) -> dict[str, str]:
    """What the operator labels a sandbox's Service with (operator/kubecua_operator/names.py);
    the chart's owner-label policy lets nobody else set the managed-by mark."""
    return {"kubecua.dev/pool": pool, "kubecua.dev/sandbox": sandbox,
            "app.kubernetes.io/component": "sandbox",
            "app.kubernetes.io/managed-by": "kubecua-operator"}  # fmt: skip


async def _until(cond, within: float = 20.0) -> None:
    """Poll a condition that no event announces (readiness seen over HTTP or a watch)."""
    async with asyncio.timeout(within):
        while True:
            if cond():
                return
            await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_pool_source_follows_endpointslice_readiness(api, namespace) -> None:
    disc = client.DiscoveryV1Api(api)
    pool = sandbox_pool(api, namespace, "desktops")
    elsewhere = sandbox_pool(api, namespace, "elsewhere")
    owned = {
        n: service(api, namespace, n, operator_labels("desktops", n), pool)
        for n in ("sb-0", "sb-1")
    }
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("sb-0", "desktops", {"10.0.0.1": True}, owned["sb-0"])
    )
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("sb-1", "desktops", {"10.0.0.2": False}, owned["sb-1"])
    )
    other = service(api, namespace, "other", operator_labels("elsewhere", "other"), elsewhere)
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("other", "elsewhere", {"10.0.0.9": True}, other)
    )
    leases = SandboxLeases()
    uid = pool["metadata"]["uid"]
    source = PoolSource("desktops", namespace, token="t", api_client=api, pool_uid=uid)
    await source.start(leases)
    try:
        assert leases.ready == ["http://10.0.0.1:8000"]
        disc.patch_namespaced_endpoint_slice(
            "sb-1", namespace, endpoint_slice("sb-1", "desktops", {"10.0.0.2": True})
        )
        await _until(lambda: set(leases.ready) == {"http://10.0.0.1:8000", "http://10.0.0.2:8000"})
        # Each URL's sandbox, by its slice's Service (the live view's links: liveview.py).
        assert leases.names == {"http://10.0.0.1:8000": "sb-0", "http://10.0.0.2:8000": "sb-1"}
        disc.delete_namespaced_endpoint_slice("sb-0", namespace)
        await _until(lambda: leases.ready == ["http://10.0.0.2:8000"])
    finally:
        await source.stop()


@pytest.mark.asyncio
async def test_pool_source_takes_no_service_the_operator_did_not_make(api, namespace) -> None:
    """Issue 42's attack: Services labelled for the pool by someone else, one plain, one with the
    operator's labels and a controller reference to another pool, one marked but owned by
    nobody. Their slices are never published; the pool's own sandbox is."""
    disc = client.DiscoveryV1Api(api)
    pool = sandbox_pool(api, namespace, "desks")
    decoy = sandbox_pool(api, namespace, "decoy")
    own = service(api, namespace, "desks-0", operator_labels("desks", "desks-0"), pool)
    attack = {
        "evil": service(api, namespace, "evil", {"kubecua.dev/pool": "desks"}),
        "desks-7": service(api, namespace, "desks-7", operator_labels("desks", "desks-7"), decoy),
        "orphan": service(api, namespace, "orphan", operator_labels("desks", "orphan")),
    }
    leases = SandboxLeases()
    source = PoolSource("desks", namespace, token="t", api_client=api,
                        pool_uid=pool["metadata"]["uid"])  # fmt: skip
    await source.start(leases)
    try:
        for i, (name, svc) in enumerate(attack.items()):
            disc.create_namespaced_endpoint_slice(
                namespace, endpoint_slice(name, "desks", {f"10.9.9.{i}": True}, svc)
            )
        disc.create_namespaced_endpoint_slice(
            namespace, endpoint_slice("desks-0", "desks", {"10.0.0.1": True}, own)
        )
        # The own slice was created last: once it is published, every foreign one was judged.
        await _until(lambda: leases.ready == ["http://10.0.0.1:8000"])
        await _until(lambda: set(source.foreign) == set(attack))
        assert source.foreign == {
            "evil": "its Service evil is not marked app.kubernetes.io/managed-by=kubecua-operator",
            "desks-7": f"its Service desks-7 is not controlled by SandboxPool desks "
            f"(uid {pool['metadata']['uid']})",
            "orphan": f"its Service orphan is not controlled by SandboxPool desks "
            f"(uid {pool['metadata']['uid']})",
        }
        # A slice claiming an own Service's name but controlled by another Service is refused.
        disc.create_namespaced_endpoint_slice(
            namespace, endpoint_slice("desks-0-x", "desks", {"10.9.9.9": True}, attack["evil"])
        )
        disc.patch_namespaced_endpoint_slice(
            "desks-0-x", namespace,
            {"metadata": {"labels": {"kubernetes.io/service-name": "desks-0"}}},
        )  # fmt: skip
        # Judged on its creation (its Service desks-0-x does not exist) and again on the patch:
        # the second verdict is the one that counts.
        claimed = "it is not controlled by Service desks-0 nor by the pool"
        await _until(lambda: source.foreign.get("desks-0-x") == claimed)
        assert leases.ready == ["http://10.0.0.1:8000"]
    finally:
        await source.stop()
