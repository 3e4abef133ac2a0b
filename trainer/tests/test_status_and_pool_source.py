"""Against the real local control plane: the status patch of a TrainingRun, and the pool source
that watches a SandboxPool's EndpointSlices by label with live readiness.

The `cluster` and `namespace` fixtures come from kubecua_testkit (conftest.py registers it)."""

from __future__ import annotations

import asyncio

import pytest
from control_plane import install_trainingrun_crd, require_control_plane
from kubernetes import client

from kubecua_trainer.config import load_from_cluster
from kubecua_trainer.sources.kube import PoolSource
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.status import (
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


def endpoint_slice(name: str, pool: str, ips: dict[str, bool]) -> client.V1EndpointSlice:
    return client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(
            name=name, labels={"kubecua.dev/pool": pool, "kubernetes.io/service-name": name}
        ),
        address_type="IPv4",
        ports=[client.DiscoveryV1EndpointPort(name="episodes", port=8000, protocol="TCP")],
        endpoints=[
            client.V1Endpoint(addresses=[ip], conditions=client.V1EndpointConditions(ready=ok))
            for ip, ok in ips.items()
        ],
    )


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
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("sb-0", "desktops", {"10.0.0.1": True})
    )
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("sb-1", "desktops", {"10.0.0.2": False})
    )
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("other", "elsewhere", {"10.0.0.9": True})
    )
    leases = SandboxLeases()
    source = PoolSource("desktops", namespace, token="t", api_client=api)
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
