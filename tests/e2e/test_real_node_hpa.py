"""A HorizontalPodAutoscaler scales a SandboxPool of real sandbox pods on the real node.

metrics-server (built from its Go module, kubecua_testkit.metrics_server) serves the pods' CPU
from the kubelet's /metrics/resource through the aggregation layer; the chart's operator runs in
its pod; the pool and its HPA are examples/sandboxpool-hpa.yaml, sized down for this 2-core node
(the sizes below), the only changes made to it. The test:
- burns a core in sandbox 0 through its desktop's own API (`/setup/launch`, no episode: the
  sandbox stays idle for the operator), and the HPA scales the pool out: the pool converges to
  the HPA's desired count, every sandbox Ready on the real node;
- leases the sandbox that scale-in would pick first among idle ones (the highest index) by
  starting an episode on its episode server, then stops the load; the HPA scales in to its
  minimum, and the pool converges with that sandbox kept: the same pod (uid, no restart), its
  episode still open and answering steps, while the idle pods are gone, by scale-in (the
  operator's SandboxesScaledIn Events).
Timings and the pool's Events go to $KUBECUA_CACHE/node/hpa-figures.json.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from kubecua_testkit import node as real
from kubecua_testkit.cluster import Cluster
from kubecua_testkit.metrics_server import MetricsServer
from kubecua_testkit.node_tests import Figures, node_images, pod_ready
from kubecua_testkit.tools import REPO, binary, run
from kubecua_testkit.wait import wait_for_object, wait_for_objects

pytestmark = pytest.mark.timeout(1500)
SYSTEM = "kubecua-system"
OPERATOR = "app.kubernetes.io/name=kubecua-operator,app.kubernetes.io/instance=kubecua"
IMAGES = ("localhost/kubecua/operator:dev", "localhost/kubecua/sandbox:dev")
NS = "hpa"
GROUP, VERSION, PLURAL = "kubecua.dev", "v1alpha1", "sandboxpools"
# What the test changes in the example: a 2-core node holds 3 sandboxes with small CPU requests,
# and short stabilization windows let it run in minutes (the example's are production's).
CPU_REQUEST, MIN, MAX, DOWN_WINDOW_S = "200m", 1, 3, 15
FIGURES = Figures("hpa-figures")
LOAD_PID = "/tmp/kubecua-hpa-load.pid"
# A task with no setup: the episode only holds the sandbox (a lease), as a trainer's would.
HOLD_TASK = {
    "id": "hpa-lease",
    "instruction": "hold the sandbox",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "echo hi", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "hi\n"}},
    },
}
FAST = {"observation": {"format": "jpeg", "max_pixels": 57600}, "settle": {"max_seconds": 1.0}}


def example_manifests() -> tuple[dict, dict]:
    """examples/sandboxpool-hpa.yaml sized by the constants above: (pool, hpa)."""
    docs = list(yaml.safe_load_all((REPO / "examples" / "sandboxpool-hpa.yaml").read_text()))
    pool = next(d for d in docs if d["kind"] == "SandboxPool")
    hpa = next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler")
    pool["metadata"]["namespace"] = hpa["metadata"]["namespace"] = NS
    pool["spec"]["replicas"] = MIN
    pool["spec"]["maxReplicas"] = MAX
    pod = pool["spec"]["desktop"]["pod"]
    pod["resources"] = {"requests": {"cpu": CPU_REQUEST, "memory": "512Mi"},
                        "limits": {"memory": "3Gi"}}  # fmt: skip
    hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"] = MIN, MAX
    hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] = DOWN_WINDOW_S
    return pool, hpa


@pytest.fixture(scope="module")
def cluster(real_node_cluster: Cluster) -> Cluster:
    missing = [i for i in IMAGES if i not in node_images(real_node_cluster)]
    if missing:  # `make test-e2e` builds them first; a bare pytest run may not have
        pytest.skip(f"images {missing} are not built: run `make images`")
    return real_node_cluster


@pytest.fixture(scope="module")
def metrics_server(cluster: Cluster, tmp_path_factory) -> Iterator[MetricsServer]:
    started = time.monotonic()
    server = MetricsServer(cluster, tmp_path_factory.mktemp("metrics-server"), resolution_s=10)
    try:
        server.start()
        FIGURES.record("metrics_server_start_to_apiservice_available_s", time.monotonic() - started)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def operator(cluster: Cluster) -> Iterator[None]:
    started = time.monotonic()
    try:  # a failed install is uninstalled too: the next module installs the same release name
        # Not Cluster.helm: its 120 s limit is shorter than the operator's start under load.
        run([binary("helm"), "--kubeconfig", cluster.kubeconfig, "install", "kubecua",
             REPO / "charts" / "kubecua", "-n", SYSTEM, "--create-namespace", "--wait",
             "--timeout", "5m"], timeout=330)  # fmt: skip
        FIGURES.record("helm_install_s", time.monotonic() - started)
        yield
    finally:
        cluster.helm("uninstall", "kubecua", "-n", SYSTEM, "--wait", check=False)


@pytest.fixture(scope="module")
def pool(cluster: Cluster, operator, metrics_server) -> Iterator[tuple[dict, dict]]:
    cluster.kubectl("create", "namespace", NS)
    pool, hpa = example_manifests()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pool, hpa]))
    try:
        yield pool, hpa
    finally:
        cluster.kubectl("delete", "hpa", "--all", "-n", NS, check=False)
        # The pool first, while the operator runs: it removes its finalizer.
        cluster.kubectl("delete", "sandboxpools", "--all", "-n", NS, "--timeout=120s",
                        check=False, timeout=150)  # fmt: skip
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def wait_pool(
    cluster: Cluster, name: str, predicate: Callable[[dict], bool], timeout: float, what: str
) -> dict:
    """Get, then watch, the pool until predicate(pool) holds."""
    custom = client.CustomObjectsApi(cluster.api_client())
    return wait_for_object(
        custom, GROUP, VERSION, NS, PLURAL, name, predicate, timeout=timeout, what=what
    )


def wait_hpa(cluster: Cluster, name: str, desired: int, timeout: float) -> Any:
    hpas = wait_for_objects(
        client.AutoscalingV2Api(cluster.api_client()).list_namespaced_horizontal_pod_autoscaler,
        lambda items: any(
            h.metadata.name == name and (h.status.desired_replicas or 0) == desired for h in items
        ),
        timeout=timeout,
        namespace=NS,
    )
    return next(h for h in hpas if h.metadata.name == name)


def converged(replicas: int, leased: int | None = None) -> Callable[[dict], bool]:
    """The pool holds exactly `replicas` sandboxes, all ready, as its spec (the HPA's) says."""

    def check(pool: dict) -> bool:
        st = pool.get("status") or {}
        return (
            pool["spec"]["replicas"] == replicas
            and st.get("replicas") == replicas
            and st.get("readyReplicas") == replicas
            and (leased is None or st.get("leasedReplicas") == leased)
        )

    return check


def pool_pods(cluster: Cluster, name: str, count: int, timeout: float) -> list:
    pods = wait_for_objects(
        client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
        lambda items: len(items) == count and all(pod_ready(p) for p in items),
        timeout=timeout,
        namespace=NS,
        label_selector=f"kubecua.dev/pool={name},app.kubernetes.io/component=sandbox",
    )
    return sorted(pods, key=lambda p: p.metadata.name)


def token(cluster: Cluster, pool: str) -> str:
    secret = next(
        s for s in client.CoreV1Api(cluster.api_client()).list_namespaced_secret(NS).items
        if s.metadata.name.startswith(f"{pool}-sandbox-token-")
    )  # fmt: skip
    return base64.b64decode(secret.data["token"]).decode()


def pod_cpu(cluster: Cluster) -> dict[str, str]:
    """The metrics API's CPU per pod of the namespace, as the HPA reads it."""
    raw = cluster.kubectl("get", "--raw", f"/apis/metrics.k8s.io/v1beta1/namespaces/{NS}/pods")
    return {
        item["metadata"]["name"]: sum_cpu(item["containers"])
        for item in json.loads(raw.stdout)["items"]
    }


def sum_cpu(containers: list[dict]) -> str:
    total = 0.0
    for c in containers:
        cpu = c["usage"]["cpu"]
        total += float(cpu[:-1]) / 1e9 if cpu.endswith("n") else float(cpu.rstrip("m")) / 1e3
    return f"{total * 1000:.0f}m"


def test_hpa_scales_pool_out_and_in_keeping_the_leased_sandbox(cluster, pool):
    manifest, hpa = pool
    name = manifest["metadata"]["name"]
    api = cluster.api_client()
    started = time.monotonic()
    first = pool_pods(cluster, name, MIN, timeout=420)
    wait_pool(cluster, name, converged(MIN), 60, "the pool at its minimum")
    FIGURES.record("pool_apply_to_first_ready_s", time.monotonic() - started)
    assert {p.spec.node_name for p in first} == {real.NAME}

    # metrics-server serves the sandbox's CPU from the real kubelet, through the aggregation
    # layer; the HPA reads it (ScalingActive) and holds the minimum while the pool idles.
    wait_until_hpa_reads_metrics(cluster, hpa["metadata"]["name"])
    idle = pod_cpu(cluster)
    assert set(idle) == {p.metadata.name for p in first}, idle
    FIGURES.record("idle_cpu_per_pod", idle)
    secret = token(cluster, name)
    auth = {"Authorization": f"Bearer {secret}"}

    # Load: a core burnt in sandbox 0 through its desktop's API; no episode, so it stays idle.
    loaded = first[0]
    launch = httpx.post(
        f"http://{loaded.status.pod_ip}:5000/setup/launch", headers=auth, timeout=30,
        json={"command": f"echo $$ > {LOAD_PID}; exec timeout 900 python3 -c 'while 1: pass'",
              "shell": True},
    )  # fmt: skip
    assert launch.status_code == 200, launch.text
    loaded_at = time.monotonic()
    wait_hpa(cluster, hpa["metadata"]["name"], MAX, timeout=180)
    FIGURES.record("load_to_hpa_desired_max_s", time.monotonic() - loaded_at)
    wait_pool(cluster, name, converged(MAX), 600, "the pool scaled out")
    pods = pool_pods(cluster, name, MAX, timeout=60)
    FIGURES.record("load_to_pool_converged_at_max_s", time.monotonic() - loaded_at)
    FIGURES.record("cpu_per_pod_under_load", pod_cpu(cluster))
    assert {p.spec.node_name for p in pods} == {real.NAME}
    hpa_now = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(
        hpa["metadata"]["name"], NS
    )
    assert hpa_now.status.desired_replicas == MAX

    # Lease the sandbox that scale-in would remove first among idle ones: the highest index.
    leased = max(pods, key=lambda p: int(p.metadata.name.rsplit("-", 1)[1]))
    url = f"http://{leased.status.pod_ip}:8000"
    start = httpx.post(f"{url}/episodes", headers=auth, json={"task": HOLD_TASK, **FAST},
                       timeout=120)  # fmt: skip
    assert start.status_code == 201, start.text
    episode = start.json()["episode_id"]
    wait_pool(cluster, name, converged(MAX, leased=1), 60, "the lease seen")
    others = [p for p in pods if p.metadata.name != leased.metadata.name]
    for pod in others:  # idle, as the operator sees them: no episode on their servers
        status = httpx.get(f"http://{pod.status.pod_ip}:8000/status", headers=auth, timeout=10)
        assert status.json()["busy"] is False, (pod.metadata.name, status.text)

    # Stop the load: the HPA goes back to its minimum; the pool keeps the leased sandbox.
    before = scaled_in(cluster, name)
    stop = httpx.post(
        f"http://{loaded.status.pod_ip}:5000/execute", headers=auth, timeout=30,
        json={"command": f"kill $(cat {LOAD_PID})", "shell": True},
    )  # fmt: skip
    assert stop.status_code == 200, stop.text
    assert stop.json()["returncode"] == 0, stop.text
    unloaded_at = time.monotonic()
    wait_hpa(cluster, hpa["metadata"]["name"], MIN, timeout=300)
    FIGURES.record("unload_to_hpa_desired_min_s", time.monotonic() - unloaded_at)
    wait_pool(cluster, name, converged(MIN, leased=1), 300, "the pool scaled in")
    [kept] = pool_pods(cluster, name, MIN, timeout=120)
    FIGURES.record("unload_to_pool_converged_at_min_s", time.monotonic() - unloaded_at)

    # The leased sandbox is the one kept: the same pod, never restarted, its episode open.
    assert kept.metadata.name == leased.metadata.name
    assert kept.metadata.uid == leased.metadata.uid
    assert kept.metadata.deletion_timestamp is None
    assert all(c.restart_count == 0 for c in kept.status.container_statuses)
    status = httpx.get(f"{url}/status", headers=auth, timeout=10).json()
    assert (status["episode_id"], status["busy"], status["episodes_served"]) == (episode, True, 0)
    step = httpx.post(f"{url}/episodes/{episode}/step", headers=auth, json={"action": "WAIT"},
                      timeout=120)  # fmt: skip
    assert step.status_code == 200, step.text
    # The idle ones went by scale-in (the operator's Events; a run once showed only one of the
    # two removals there, so the pods above are the record and the Events are kept for reading).
    FIGURES.record("pool_events", pool_events(cluster, name))
    assert scaled_in(cluster, name) > before
    gone = client.CoreV1Api(api).list_namespaced_pod(NS).items
    assert not {p.metadata.uid for p in gone} & {p.metadata.uid for p in others}

    # Released, the sandbox is idle again; the pool stays at the HPA's count.
    released = httpx.delete(f"{url}/episodes/{episode}", headers=auth, timeout=120)
    assert released.status_code == 200, released.text
    wait_pool(cluster, name, converged(MIN, leased=0), 60, "the lease ended")


def pool_events(cluster: Cluster, name: str) -> list[str]:
    events = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name}"
    )
    return [f"{e.reason}: {e.message} (x{e.count or 1})" for e in events.items]


def scaled_in(cluster: Cluster, name: str) -> int:
    """Sandboxes the operator removed by scale-in so far, from its Events (one per pass that
    removed any; equal messages are counted in one Event)."""
    events = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name},reason=SandboxesScaledIn"
    )
    total = 0
    for event in events.items:
        found = re.fullmatch(r"removed (\d+) sandboxes \(ScaledIn\)", event.message)
        assert found, event.message
        total += int(found.group(1)) * (event.count or 1)
    return total


def wait_until_hpa_reads_metrics(cluster: Cluster, name: str, timeout: float = 180) -> None:
    """Until the HPA computes from metrics (ScalingActive True, a current CPU utilization)."""

    def reading(items: list) -> bool:
        for h in items:
            conds = {c.type: c.status for c in h.status.conditions or []}
            if h.metadata.name == name and conds.get("ScalingActive") == "True":
                return bool(h.status.current_metrics)
        return False

    wait_for_objects(
        client.AutoscalingV2Api(cluster.api_client()).list_namespaced_horizontal_pod_autoscaler,
        reading,
        timeout=timeout,
        namespace=NS,
    )
