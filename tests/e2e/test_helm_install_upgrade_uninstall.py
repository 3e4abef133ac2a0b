"""`helm install` of charts/kubecua on the real control plane: the CRDs are established, the
operator pod is scheduled on a kwok node and becomes Ready, its ServiceAccount can do what the
operator does and no more, `helm upgrade` rolls a new setting out, and `helm uninstall` removes
the operator but leaves the CRDs and users' SandboxPools. The opt-in monitoring objects are
accepted by the API server (with stand-in Prometheus Operator CRDs from charts/testdata)."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from kubecua_testkit.tools import REPO
from kubecua_testkit.wait import wait_for_objects

CHART = str(REPO / "charts" / "kubecua")
CRDS = ["sandboxpools.kubecua.dev", "trainingruns.kubecua.dev", "taskverifications.kubecua.dev"]
MONITORING = ",".join(
    f"{k}.enabled=true" for k in ("serviceMonitor", "podMonitor", "prometheusRule", "dashboards")
)


def adopt_crds(cluster, release: str, namespace: str) -> None:
    """Hand CRDs that exist already (kubectl apply -f crds/, or a former release) to `release`:
    helm adopts an object only when it carries the release's ownership metadata."""
    for crd in CRDS:
        if cluster.kubectl("get", "crd", crd, check=False).returncode != 0:
            continue
        cluster.kubectl("label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
        cluster.kubectl(
            "annotate", "--overwrite", "crd", crd,
            f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}",
        )  # fmt: skip


def can_i(cluster, sa: str, verb: str, resource: str, namespace: str) -> bool:
    """kubectl auth can-i; "pods/exec" asks for the subresource (not a pod named exec)."""
    resource, _, sub = resource.partition("/")
    extra = [f"--subresource={sub}"] if sub else []
    proc = cluster.kubectl(
        "auth", "can-i", verb, resource, *extra, "-n", namespace, f"--as={sa}", check=False
    )
    return proc.stdout.strip() == "yes"


def is_ready(pod) -> bool:
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


@pytest.fixture(scope="module")
def installed(cluster):
    namespace = f"kubecua-{uuid.uuid4().hex[:6]}"
    release = f"kc{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl(
        "apply", "-f", str(REPO / "charts" / "testdata" / "monitoring.coreos.com-crds.yaml")
    )
    adopt_crds(cluster, release, namespace)
    cluster.helm(
        "install", release, CHART, "-n", namespace, "--set", MONITORING,
        "--wait", "--timeout", "120s",
    )  # fmt: skip
    yield release, namespace
    cluster.helm("uninstall", release, "-n", namespace, "--wait", check=False)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_install_establishes_crds_and_runs_the_operator_on_a_kwok_node(cluster, installed):
    release, namespace = installed
    out = cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}" for c in CRDS]
    )
    assert out.stdout.count("condition met") == len(CRDS)
    core = client.CoreV1Api(cluster.api_client())
    pods = wait_for_objects(
        core.list_namespaced_pod,
        lambda ps: any(is_ready(p) for p in ps),
        namespace=namespace,
        label_selector=f"app.kubernetes.io/name=kubecua-operator,app.kubernetes.io/instance={release}",
    )
    (pod,) = pods
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
    (container,) = pod.spec.containers
    assert container.security_context.read_only_root_filesystem is True
    assert pod.spec.security_context.run_as_non_root is True
    status = json.loads(cluster.helm("status", release, "-n", namespace, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    assert "kubectl apply -f examples/sandboxpool-pod.yaml" in status["info"]["notes"]


def test_monitoring_objects_are_accepted_by_the_api_server(cluster, installed):
    _, namespace = installed
    for kind in ("servicemonitors", "podmonitors", "prometheusrules"):
        items = json.loads(cluster.kubectl("get", kind, "-n", namespace, "-o", "json").stdout)
        assert len(items["items"]) == 1, kind
    cms = cluster.kubectl("get", "cm", "-n", namespace, "-l", "grafana_dashboard=1", "-o", "name")
    assert len(cms.stdout.split()) == 3


def test_operator_service_account_has_least_privilege(cluster, installed):
    release, namespace = installed
    sa = f"system:serviceaccount:{namespace}:{release}-kubecua-operator"
    elsewhere = "default"
    for verb, resource in [
        ("create", "pods"), ("delete", "pods"), ("watch", "sandboxpools.kubecua.dev"),
        ("patch", "trainingruns.kubecua.dev/status"), ("create", "jobs.batch"),
        ("create", "roles.rbac.authorization.k8s.io"),
        ("create", "endpointslices.discovery.k8s.io"),
        ("create", "secrets"), ("create", "podmonitors.monitoring.coreos.com"),
    ]:  # fmt: skip
        assert can_i(cluster, sa, verb, resource, elsewhere), f"cannot {verb} {resource}"
    for verb, resource in [
        ("get", "secrets"), ("list", "secrets"), ("watch", "secrets"), ("delete", "secrets"),
        ("patch", "secrets"), ("delete", "networkpolicies.networking.k8s.io"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        ("escalate", "roles.rbac.authorization.k8s.io"),
        ("delete", "nodes"), ("delete", "sandboxpools.kubecua.dev"), ("create", "pods/exec"),
    ]:  # fmt: skip
        assert not can_i(cluster, sa, verb, resource, elsewhere), f"may {verb} {resource}"


def test_upgrade_rolls_out_a_new_setting(cluster, installed):
    release, namespace = installed
    cluster.helm(
        "upgrade", release, CHART, "-n", namespace, "--reuse-values",
        "--set", "operator.resyncSeconds=5", "--wait", "--timeout", "120s",
    )  # fmt: skip
    dep = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment(
        f"{release}-kubecua-operator", namespace
    )
    env = {e.name: e.value for e in dep.spec.template.spec.containers[0].env}
    assert env["KUBECUA_OPERATOR_RESYNC_SECONDS"] == "5"
    assert dep.spec.strategy.type == "Recreate"
    history = json.loads(cluster.helm("history", release, "-n", namespace, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]


def test_namespace_scope_grants_only_the_watched_namespaces(cluster):
    namespace, other = f"kc-ns-{uuid.uuid4().hex[:6]}", f"kc-other-{uuid.uuid4().hex[:6]}"
    for ns in (namespace, other):
        cluster.kubectl("create", "namespace", ns)
    try:
        cluster.helm(
            "install", "scoped", CHART, "-n", namespace, "--set", "crds.install=false",
            "--set", "rbac.scope=namespace", "--wait", "--timeout", "120s",
        )  # fmt: skip
        sa = f"system:serviceaccount:{namespace}:scoped-kubecua-operator"
        assert can_i(cluster, sa, "create", "pods", namespace)
        assert not can_i(cluster, sa, "create", "pods", other)
        assert can_i(cluster, sa, "watch", "customresourcedefinitions.apiextensions.k8s.io", other)
        cluster.helm("uninstall", "scoped", "-n", namespace, "--wait")
    finally:
        for ns in (namespace, other):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_uninstall_keeps_crds_and_users_pools(cluster, installed):
    release, namespace = installed
    cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / "sandboxpool-pod.yaml"))
    cluster.helm("uninstall", release, "-n", namespace, "--wait")
    apps = client.AppsV1Api(cluster.api_client())
    wait_for_objects(apps.list_namespaced_deployment, lambda ds: not ds, namespace=namespace)
    for crd in CRDS:
        assert cluster.kubectl("get", "crd", crd, check=False).returncode == 0
    pool = cluster.kubectl("get", "sandboxpool", "ubuntu-desktops", "-n", namespace, "-o", "json")
    assert json.loads(pool.stdout)["spec"]["replicas"] == 8
    crb = cluster.kubectl("get", "clusterrole", f"{release}-kubecua-operator", check=False)
    assert crb.returncode != 0
    assert "NotFound" in crb.stderr


def test_uninstall_with_crds_keep_false_deletes_crds_and_pools(cluster):
    namespace = f"kc-drop-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        adopt_crds(cluster, "dropping", namespace)
        cluster.helm(
            "install", "dropping", CHART, "-n", namespace, "--set", "crds.keep=false",
            "--wait", "--timeout", "120s",
        )  # fmt: skip
        cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "examples/sandboxpool-pod.yaml"))
        cluster.helm("uninstall", "dropping", "-n", namespace, "--wait")
        for crd in CRDS:
            gone = cluster.kubectl("get", "crd", crd, check=False)
            assert gone.returncode != 0
            assert "NotFound" in gone.stderr
    finally:
        # Later suites in this session expect the CRDs: put them back as `kubectl apply` would.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
