"""Scale-in through the scale subresource, as a HorizontalPodAutoscaler writes it, never removes a
sandbox whose episode began after the operator's last poll of the episode servers.

The operator learns leases by polling (KUBECUA_OPERATOR_POLL_SECONDS), so its view can be one
period old when an HPA lowers spec.replicas. Here the period is 5 s and an episode starts on the
sandbox that scale-in would take first among idle ones just before the HPA's write: the
operator must ask that sandbox again before it removes it, and keep it. The sandboxes are real
HTTP episode servers (EpisodeStub) behind an external pool; the HPA's write is the same PATCH of
sandboxpools/scale the HPA controller sends (tests/e2e/test_real_node_hpa.py runs a real HPA).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import OperatorProcess, wait_until
from .episode_stub import EpisodeStub
from .helpers import condition, pool_status
from .test_pool_run_demand import Removals, published

SANDBOXES = 3


@pytest.fixture
def slow_poller(operator: OperatorProcess, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The suite's operator swapped for one polling episode servers every 5 s, then back."""
    operator.stop()
    env = {**operator.extra_env, "KUBECUA_OPERATOR_POLL_SECONDS": "5"}
    slow = OperatorProcess(operator.kubeconfig, tmp_path / "operator.log", env)
    try:
        slow.start()
        yield slow
    finally:
        slow.stop()
        operator.start()


def test_scale_in_keeps_a_sandbox_leased_since_the_last_poll(cluster, kube, slow_poller, namespace):
    stubs = [EpisodeStub(token="t0ken") for _ in range(SANDBOXES)]
    removals = Removals(cluster.api_client(), namespace, "ext")
    try:
        kube.create({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ext-sandbox-token", "namespace": namespace},
            "stringData": {"token": "t0ken"},
        })  # fmt: skip
        kube.create({
            "apiVersion": "kubecua.dev/v1alpha1", "kind": "SandboxPool",
            "metadata": {"name": "ext", "namespace": namespace},
            "spec": {"replicas": SANDBOXES, "maxReplicas": SANDBOXES, "backend": "external",
                     "desktop": {"external": {"endpoints": [s.url for s in stubs]}}},
        })  # fmt: skip
        wait_until(
            lambda: pool_status(kube, namespace, "ext").get("readyReplicas") == SANDBOXES
            and len(published(kube, namespace)) == SANDBOXES,
            60,
            "3 ready sandboxes",
        )
        # The lease begins between two polls; the HPA's scale-in follows at once.
        stubs[2].start_episode()
        kube.patch("SandboxPool", namespace, "ext", {"spec": {"replicas": 1}}, sub="scale")

        st = wait_until(
            lambda: (s := pool_status(kube, namespace, "ext")).get("replicas") == 1
            and len(published(kube, namespace)) == 1
            and s,
            60,
            "the pool scaled in to one sandbox",
        )
        assert published(kube, namespace) == {"ext-2"}  # the leased one, not the idle ext-0
        assert set(removals.at) == {"ext-0", "ext-1"}
        assert st["leasedReplicas"] == 1
        assert condition(st, "Ready")["status"] == "True"
        # The episode server's record: its episode ran on, and it is still there after it ends.
        stubs[2].end_episode()
        began, ended = stubs[2].episodes[0]
        assert ended is not None
        assert ended > began
        assert published(kube, namespace) == {"ext-2"}
    finally:
        removals.stop()
        for s in stubs:
            s.close()
