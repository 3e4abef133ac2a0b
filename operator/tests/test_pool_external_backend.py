"""External backend: local episode servers on 127.0.0.1 become Services + EndpointSlices, their
readiness and leases come from polling, and a trainer-style EndpointSlice watcher sees exactly
the ready sandboxes as the pool changes."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from .conftest import wait_until
from .episode_stub import EpisodeStub
from .helpers import pool_status, wait_pool


@pytest.fixture
def stubs() -> Iterator[list[EpisodeStub]]:
    servers = [EpisodeStub(token="t0ken") for _ in range(3)]
    yield servers
    for s in servers:
        s.close()


def ready_urls(kube, namespace: str, pool: str) -> set[str]:
    """What a label-selector source computes from the pool's EndpointSlices: ready endpoints,
    dialled at the kubecua.dev/url annotation when present (loopback cannot be a slice address)."""
    urls = set()
    for s in kube.list("EndpointSlice", namespace, f"kubecua.dev/pool={pool}"):
        port = next(p["port"] for p in s["ports"] if p["name"] == "episodes")
        url = (s["metadata"].get("annotations") or {}).get("kubecua.dev/url")
        for ep in s.get("endpoints") or []:
            if ep.get("conditions", {}).get("ready") is not False:
                urls |= {url or f"http://{a}:{port}" for a in ep["addresses"]}
    return urls


def local_url(stub: EpisodeStub) -> str:
    return stub.url


def external_pool(namespace: str, stubs: list[EpisodeStub], replicas: int, **spec) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "ext", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "backend": "external",
            "desktop": {"external": {"endpoints": [s.url for s in stubs]}},
            **spec,
        },
    }


def token_secret(namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ext-sandbox-token", "namespace": namespace},
        "data": {"token": base64.b64encode(b"t0ken").decode()},
    }


def test_discovery_follows_readiness_of_external_sandboxes(kube, operator, namespace, stubs):
    kube.create(token_secret(namespace))  # the external machines' own token is kept
    kube.create(external_pool(namespace, stubs, 3))
    wait_pool(kube, namespace, "ext", ready=3)
    everyone = {local_url(s) for s in stubs}
    assert wait_until(lambda: ready_urls(kube, namespace, "ext") == everyone, 30)
    svc = kube.get("Service", namespace, "ext-1")
    assert "selector" not in svc["spec"]
    assert {p["port"] for p in svc["spec"]["ports"]} == {8000, 5000, 9222, 8080}
    secret = kube.get("Secret", namespace, "ext-sandbox-token")
    assert base64.b64decode(secret["data"]["token"]) == b"t0ken"

    stubs[1].ready = False  # e.g. resetting after an episode
    wait_until(lambda: ready_urls(kube, namespace, "ext") == everyone - {local_url(stubs[1])}, 30)
    assert wait_pool(kube, namespace, "ext", ready=2)["replicas"] == 3
    stubs[1].ready = True
    wait_until(lambda: ready_urls(kube, namespace, "ext") == everyone, 30)


def test_leases_are_counted_and_scale_in_keeps_leased_sandboxes(
    kube, cluster, operator, namespace, stubs
):
    kube.create(token_secret(namespace))
    kube.create(external_pool(namespace, stubs, 3))
    wait_pool(kube, namespace, "ext", ready=3)
    stubs[2].busy = True  # an episode is running on ext-2
    wait_until(lambda: pool_status(kube, namespace, "ext").get("leasedReplicas") == 1, 30)
    cluster.kubectl("scale", "sbp/ext", "-n", namespace, "--replicas=2")
    wait_until(
        lambda: ready_urls(kube, namespace, "ext") == {local_url(stubs[0]), local_url(stubs[2])},
        30,
        "ext-1 (idle) removed, ext-2 (leased) kept",
    )
