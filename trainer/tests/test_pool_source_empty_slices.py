"""The trainer's pool source (sources/kube.py) and a sandbox whose pod is gone: its Service's
EndpointSlice then has no endpoints, which the API server stores and returns as `endpoints:
null`, and the kubernetes client's V1EndpointSlice refuses to be built from it. Against the real
local control plane: such a slice must not stop the source from seeing sandboxes come and go.
And a list or watch that keeps failing is logged, once per distinct error.

The `cluster` and `namespace` fixtures come from kubecua_testkit (conftest.py registers it)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import pytest
from control_plane import POOL_CRD, install_trainingrun_crd, require_control_plane
from kubernetes import client

from kubecua_trainer.sources.kube import PoolSource
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.telemetry.status import GROUP, VERSION


@pytest.fixture(scope="module")
def api(cluster):
    require_control_plane()
    return install_trainingrun_crd(cluster, POOL_CRD)


class Announced(SandboxLeases):
    """Leases that say when the source sets the ready set, so a test waits on that."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def set_ready(self, urls: list[str] | set[str]) -> None:
        super().set_ready(urls)
        self.changed.set()


async def until(leases: Announced, cond: Any, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while True:
            leases.changed.clear()
            if cond():
                return
            await leases.changed.wait()


def sandbox(api: Any, namespace: str, pool: dict, name: str, ip: str | None) -> None:
    """A sandbox as the operator leaves it: its Service (labelled, marked, controlled by the
    pool) and that Service's slice as the EndpointSlice controller writes it; `ip` None: its
    pod is gone, the slice has no endpoints."""
    meta = pool["metadata"]
    labels = {"kubecua.dev/pool": meta["name"], "kubecua.dev/sandbox": name,
              "app.kubernetes.io/component": "sandbox",
              "app.kubernetes.io/managed-by": "kubecua-operator"}  # fmt: skip
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxPool", "name": meta["name"],
             "uid": meta["uid"], "controller": True}  # fmt: skip
    svc = client.CoreV1Api(api).create_namespaced_service(namespace, {
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "spec": {"clusterIP": "None", "ports": [{"port": 8000}]},
    })  # fmt: skip
    by_service = {"apiVersion": "v1", "kind": "Service", "name": name,
                  "uid": svc.metadata.uid, "controller": True}  # fmt: skip
    # Not read back as a model: the client refuses a slice with no endpoints (what this tests).
    client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(namespace, {
        "metadata": {"name": name, "ownerReferences": [by_service],
                     "labels": {**labels, "kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "episodes", "port": 8000, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}] if ip else [],
    }, _preload_content=False)  # fmt: skip


def pool_of(api: Any, namespace: str, name: str) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxPool",
            "metadata": {"name": name}, "spec": {"replicas": 0, "backend": "pod"}}  # fmt: skip
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "sandboxpools", body
    )


@pytest.mark.asyncio
async def test_a_slice_with_no_endpoints_does_not_stop_the_pool_watch(api, namespace) -> None:
    disc = client.DiscoveryV1Api(api)
    pool = pool_of(api, namespace, "desks")
    sandbox(api, namespace, pool, "desks-0", "10.0.0.1")
    sandbox(api, namespace, pool, "desks-1", None)  # its pod deleted, being made again
    # What the API server returns for `endpoints: []`: null, which the client's model refuses.
    raw = disc.read_namespaced_endpoint_slice("desks-1", namespace, _preload_content=False)
    assert json.loads(raw.data)["endpoints"] is None
    with pytest.raises(ValueError, match="`endpoints`, must not be `None`"):
        disc.read_namespaced_endpoint_slice("desks-1", namespace)

    leases = Announced()
    source = PoolSource("desks", namespace, token="t", api_client=api,
                        pool_uid=pool["metadata"]["uid"])  # fmt: skip
    await source.start(leases)
    try:
        assert leases.ready == ["http://10.0.0.1:8000"]
        sandbox(api, namespace, pool, "desks-2", "10.0.0.3")  # a new sandbox turns ready
        await until(
            leases, lambda: leases.ready == ["http://10.0.0.1:8000", "http://10.0.0.3:8000"]
        )
        disc.patch_namespaced_endpoint_slice(
            "desks-0", namespace, {"endpoints": []}, _preload_content=False
        )  # its pod is gone
        await until(leases, lambda: leases.ready == ["http://10.0.0.3:8000"])
        # It comes back (a new pod, a new address) and is seen again.
        disc.patch_namespaced_endpoint_slice("desks-1", namespace, {
            "endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": True}}],
        })  # fmt: skip
        await until(leases, lambda: set(leases.ready) == {"http://10.0.0.2:8000",
                                                         "http://10.0.0.3:8000"})  # fmt: skip
        assert source.foreign == {}
        assert leases.names["http://10.0.0.2:8000"] == "desks-1"
    finally:
        await source.stop()


class Failing:
    """A CoreV1Api whose list fails with `errors` in turn; the source is stopped after them."""

    def __init__(self, source: PoolSource, errors: list[Exception]) -> None:
        self.source, self.errors = source, list(errors)

    def list_namespaced_service(self, *args: Any, **kwargs: Any) -> Any:
        err = self.errors.pop(0)
        if not self.errors:
            self.source._stop.set()
        raise err


def test_a_failing_watch_is_logged_once_per_distinct_error(caplog) -> None:
    source = PoolSource("desks", "ns", token="t", api_client=object(), pool_uid="u")
    source.retry_seconds = 0.0
    down = ConnectionRefusedError(111, "Connection refused")
    forbidden = client.ApiException(status=403, reason="Forbidden")
    source._core = Failing(source, [down, down, down, forbidden, forbidden, down])
    with caplog.at_level(logging.WARNING, logger="kubecua_trainer.sources.kube"):
        source._run(None, lambda: None, threading.Event())
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    assert all(
        m.startswith("SandboxPool ns/desks: watching its EndpointSlices failed") for m in said
    )
    assert said[0].endswith("ConnectionRefusedError: [Errno 111] Connection refused")
    assert said[1].endswith("ApiException: (403) Reason: Forbidden")
    assert said[2].endswith("ConnectionRefusedError: [Errno 111] Connection refused")
