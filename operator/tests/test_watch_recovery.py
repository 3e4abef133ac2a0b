"""Issue 42, item 1: the operator outlives a revoked binding, on the real API server.

The operator runs as the chart's ServiceAccount with the chart's RBAC, its watch requests ending
every 5 s (so every stream meets the fault, as an API-server restart would make them). With its
ClusterRoleBinding deleted for 60 s, kopf's watchers used to give up after their retries and
never come back: the pool below then never saw its new spec nor the sandbox deleted meanwhile.
Now the streams list and watch again until the binding is back, /healthz fails while they are
down, and the pool heals with the same operator process. A watch that cannot come back (its
resource's list and watch taken away for good) keeps /healthz failing, so a kubelet restarts it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubecua_operator.k8s import Kube
from kubecua_testkit.cluster import Cluster, down, up

from .conftest import REPO, OperatorProcess, wait_until
from .helpers import pool_manifest, wait_pool
from .test_security import healthy, render, sa_kubeconfig

# A release of its own: test_security.py's is being taken down (its namespace terminating).
RELEASE, OP_NS = "heal", "kubecua-heal"
BINDING = ROLE = f"{RELEASE}-kubecua-operator"
POOLS, JOBS = "sandboxpools.v1alpha1.kubecua.dev@cluster", "jobs.v1.batch@cluster"
REVOKED_SECONDS = 60  # the fault: an RBAC hiccup longer than kopf's retries (~16 s)


# A control plane of this module's own. The fault is cluster-wide (the operator's binding), so
# the operator then reconciles whatever else is there: in the shared cluster, pools other test
# files left in namespaces still terminating, whose passes fail with 403 every 2 s. There, once
# (make test-operator, 2026-11-29, load about 14), the pool below never healed within 60 s of the
# binding's return, its loop silent; alone it healed in 1-2 s three times out of three. Not
# diagnosed (docs/reliability.md says so); this module measures the fault, not the neighbours.
@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    name = f"kubecua-heal-{os.getpid()}"
    c = up(name, nodes=3)
    try:
        c.kubectl("apply", "-f", str(REPO / "crds"))
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                  "crd/sandboxpools.kubecua.dev", "crd/trainingruns.kubecua.dev")  # fmt: skip
        yield c
    finally:
        down(name)


# The kit's `namespace` fixture takes this module's `cluster` by name; `kube` and `crds` are
# session-scoped in conftest.py, so this module has its own.
@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster.api_client())


@pytest.fixture(scope="module")
def chart_rbac(cluster: Any) -> Iterator[str]:
    """The chart's ServiceAccount, RBAC and admission policies, as `helm install` makes them."""
    cluster.kubectl("create", "namespace", OP_NS, check=False)
    docs = render("serviceaccount.yaml", "rbac.yaml", "admissionpolicies.yaml",
                  release=RELEASE, namespace=OP_NS)  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=docs)
    yield docs
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=docs, check=False)
    cluster.kubectl("delete", "namespace", OP_NS, "--wait=false", check=False)


@pytest.fixture(scope="module")
def sa_operator(
    cluster: Any, chart_rbac: str, token_key: Path, tmp_path_factory: Any
) -> Iterator[OperatorProcess]:
    """The operator as the chart's account, watches renewed every 5 s; one process for both
    tests, each of which puts the RBAC back as the chart makes it."""
    env = {
        "KUBECUA_OPERATOR_TOKEN_KEY_FILE": str(token_key),
        "KUBECUA_OPERATOR_WATCH_TIMEOUT_SECONDS": "5",
        "KUBECUA_OPERATOR_WATCH_BACKOFF_MAX_SECONDS": "4",
    }
    tmp_path = tmp_path_factory.mktemp("heal")
    kubeconfig = sa_kubeconfig(cluster, tmp_path / "sa.yaml", RELEASE, OP_NS)
    proc = OperatorProcess(kubeconfig, tmp_path / "op.log", env)
    try:
        proc.start()
        yield proc
    finally:
        cluster.kubectl("apply", "-f", "-", input=chart_rbac, check=False)  # whatever the test did
        proc.stop()


def watch_up(proc: OperatorProcess, stream: str) -> float:
    return proc.metric("kubecua_operator_watch_up", watch=stream)


def test_a_revoked_binding_heals_without_a_restart(
    cluster, kube, chart_rbac, sa_operator, namespace
):
    proc = sa_operator
    assert proc.proc is not None
    pid = proc.proc.pid
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2, total=2)

    cluster.kubectl("delete", "clusterrolebinding", BINDING)
    revoked = time.monotonic()
    # What the operator must learn once it may look again: a new spec, and a sandbox gone.
    kube.patch("SandboxPool", namespace, "desks", {"spec": {"replicas": 4}})
    kube.delete("Pod", namespace, "desks-0")
    wait_until(lambda: watch_up(proc, POOLS) == 0, REVOKED_SECONDS, "the pools' watch down")
    wait_until(lambda: not healthy(proc), REVOKED_SECONDS, "/healthz to fail")
    assert proc.metric("kubecua_operator_watch_restarts_total", watch=POOLS) >= 1
    # The fault's length is the scenario itself (nothing to wait on): the binding stays away
    # for 60 s, several rounds of kopf's retries.
    time.sleep(max(0.0, revoked + REVOKED_SECONDS - time.monotonic()))
    assert kube.get("Pod", namespace, "desks-3") is None  # nothing healed while revoked

    cluster.kubectl("apply", "-f", "-", input=chart_rbac)  # the binding back
    restored = time.monotonic()
    wait_pool(kube, namespace, "desks", ready=4, total=4, timeout=60)
    healed = time.monotonic() - restored
    wait_until(lambda: healthy(proc), 30, "/healthz to recover")
    assert proc.proc is not None
    assert proc.proc.pid == pid  # the same process: no restart
    assert proc.proc.poll() is None
    assert watch_up(proc, POOLS) == 1
    print(f"pool healed {healed:.1f}s after the binding came back")


def test_a_watch_that_cannot_recover_fails_liveness(
    cluster, kube, chart_rbac, sa_operator, namespace
):
    proc = sa_operator
    wait_until(lambda: watch_up(proc, JOBS) == 1, 30, "the Jobs watch up")
    role = json.loads(cluster.kubectl("get", "clusterrole", ROLE, "-o", "json").stdout)
    for rule in role["rules"]:
        if "jobs" in rule.get("resources", []):
            rule["verbs"] = [v for v in rule["verbs"] if v not in ("list", "watch")]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(role))

    wait_until(lambda: watch_up(proc, JOBS) == 0, 60, "the Jobs watch down")
    wait_until(lambda: not healthy(proc), 30, "/healthz to fail")
    # Only that stream is down, and the rest of the operator still works: a pool reconciles.
    assert watch_up(proc, POOLS) == 1
    kube.create(pool_manifest("still", namespace, 1))
    wait_pool(kube, namespace, "still", ready=1, total=1)
    assert not healthy(proc)

    cluster.kubectl("apply", "-f", "-", input=chart_rbac)  # the grant back: the stream too
    wait_until(lambda: watch_up(proc, JOBS) == 1, 30, "the Jobs watch back")
    wait_until(lambda: healthy(proc), 30, "/healthz to recover")
