"""The README's cluster quick start on a real node: pods that really run (containerd + runc,
kubelet and kube-proxy built from the pinned k8s.io/kubernetes; kubecua_testkit.node).

- `helm install` the chart (the README's own command, read from README.md): the operator pod
  runs on the real node and becomes Ready, and it answers its health endpoint at its pod IP;
- the rest of the README's cluster quick start, every line as written there (in `default`, with
  hostPath PersistentVolumes for its two claims): its 2-desktop pool turns Ready, a Job writes the
  tiny model, and its CPU TrainingRun finishes its 2 steps;
- a pod-backend SandboxPool from the sandbox image: the pods run the image's real desktop and
  episode server, pass their readiness, and their EndpointSlices (found by the pool's label, as
  the trainer finds them) list exactly their pod IPs, which answer /readyz;
- a TrainingRun with the tiny model on the CPU (hostPath PersistentVolumes for the model and the
  checkpoints): its trainer pod plays episodes against those sandboxes over the pod network and
  patches the run's status; suspended after step 1, the pod gets SIGTERM and checkpoints the
  step it is at; resumed, a new pod trains the rest from that checkpoint; a held-out task is
  evaluated before step 1 and after the last step, and the last evaluation reaches
  status.evaluation; its status.cost's sandbox-seconds agree with the episode servers' own
  lease histograms (docs/cost.md);
- the pool's live view (docs/live-view.md): `kubectl port-forward` to a sandbox serves noVNC,
  whose WebSocket opens for the pool's token only, and no pod reaches that port;
- Debian's Prometheus scrapes the operator, the sandboxes and the trainer pods chosen by the
  chart's ServiceMonitor and PodMonitor, and every query of the training dashboard returns the
  run's series.
- faults, each judged by its records: the operator SIGKILLed while the pool scales and a run's
  children are made (no duplicate, no orphan), a sandbox pod deleted while it holds an episode
  (excluded as an infrastructure failure, no sample from it, later steps on the others), and
  the trainer pod deleted mid-step (it resumes from its checkpoint, its sandboxes handed back).

The NetworkPolicies the operator creates are enforced (kube-router's policy controller): a pod
without the pool's client label is refused by the sandboxes, while the trainer reaches them. The
kwok node of this cluster is tainted, so nothing lands there by
accident; every pod is asserted to be on the real node. Timings go to
$KUBECUA_CACHE/node/journey-figures.json.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from kubecua_testkit import node as real
from kubecua_testkit.cluster import Cluster
from kubecua_testkit.components import free_port, http_ok, wait_until
from kubecua_testkit.monitors import Discovery, scrape_configs
from kubecua_testkit.node_tests import Figures, node_images, pod_ready
from kubecua_testkit.prom import query_range
from kubecua_testkit.tools import REPO, binary, cache_dir
from kubecua_testkit.wait import wait_for_objects

# The first test pays for the node and its image imports (minutes on a cold machine), the training
# ones for a whole run: more than the suite's default 600 s per test when the machine is loaded.
pytestmark = pytest.mark.timeout(1800)
SYSTEM = "kubecua-system"
OPERATOR = "app.kubernetes.io/name=kubecua-operator,app.kubernetes.io/instance=kubecua"
POOL = "desks"
# Three desktops, the run needing one: a trainer stopped by SIGTERM mid-episode leaves its
# (at most two) sandboxes leased until the episode server's idle timeout (600 s), so the resumed
# pod would otherwise wait that long for the same sandboxes (see docs/real-node.md).
SANDBOXES = 3
IMAGES = ("localhost/kubecua/operator:dev", "localhost/kubecua/sandbox:dev")
FIGURES = Figures("journey-figures")


@pytest.fixture(scope="module")
def cluster(real_node_cluster: Cluster) -> Cluster:
    missing = [i for i in IMAGES if i not in node_images(real_node_cluster)]
    if missing:  # `make test-e2e` builds them first; a bare pytest run may not have
        pytest.skip(f"images {missing} are not built: run `make images`")
    return real_node_cluster


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[None]:
    started = time.monotonic()
    install = quick_start_commands()[0]  # the README's own `helm install`, as written
    assert install.startswith(f"helm install kubecua charts/kubecua -n {SYSTEM}"), install
    try:  # a failed install is uninstalled too: the next module installs the same release name
        shell(cluster, install)
        wait_for_objects(
            client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
            lambda pods: any(pod_ready(p) for p in pods),
            timeout=120,
            namespace=SYSTEM,
            label_selector=OPERATOR,
        )
        FIGURES.record("helm_install_to_operator_ready_s", time.monotonic() - started)
        yield
    finally:
        cluster.helm("uninstall", "kubecua", "-n", SYSTEM, "--wait", check=False)


def test_operator_pod_runs_and_is_ready_on_the_real_node(cluster, release):
    core = client.CoreV1Api(cluster.api_client())
    operator = core.list_namespaced_pod(SYSTEM, label_selector=OPERATOR).items
    assert len(operator) == 1
    pod = operator[0]
    assert pod.spec.node_name == real.NAME
    assert pod_ready(pod)
    state = pod.status.container_statuses[0]
    assert state.state.running is not None
    assert state.restart_count == 0
    # The pod network is real: its health endpoint answers at the pod's own IP.
    assert pod.status.pod_ip.startswith("10.244.")
    r = httpx.get(f"http://{pod.status.pod_ip}:8081/healthz", timeout=10)
    assert r.status_code == 200


# ---- the README's cluster quick start, line by line as written there ---------------------------
QS_POOL, QS_RUN, QS_SANDBOXES, QS_STEPS = "desks", "tiny", 2, 2


def quick_start_commands() -> list[str]:
    """The commands of README.md's cluster quick start (the sh block after `On a cluster:`),
    one a line, exactly as a user would paste them."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"^On a cluster:.*?^```sh\n(.*?)^```", text, re.S | re.M)
    assert block, "README.md has no sh block after `On a cluster:`"
    return [line for line in block.group(1).splitlines() if line.strip()]


def shell(cluster: Cluster, command: str, timeout: float = 1000) -> str:
    """One command run by bash from the repository's root, as a user would, with the cluster's
    kubeconfig and the cached kubectl and helm first on PATH; its stdout."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PATH": f"{cache_dir() / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
    proc = subprocess.run(
        ["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def quick_start(cluster: Cluster, release, tmp_path_factory) -> dict:
    """Every line after `helm install` of the README's quick start, in the `default` namespace;
    the storage a cluster's provisioner would give is two hostPath PersistentVolumes bound to the
    two claims. What the tests check is read back before everything is deleted again (so that
    the journey's own pool has the node to itself)."""
    if TRAINER_IMAGE not in node_images(cluster):
        pytest.skip(f"{TRAINER_IMAGE} is not built: `make test-e2e` (or `make images`) builds it")
    root = tmp_path_factory.mktemp("quick-start")
    volumes: list[dict[str, Any]] = []
    for claim in ("models", "checkpoints"):
        (root / claim).mkdir()
        os.chown(root / claim, 65532, 65532)  # the trainer image's user writes both
        volumes.append({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"quick-start-{claim}"},
            "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "",
                     "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(root / claim), "type": "Directory"},
                     "claimRef": {"namespace": "default", "name": claim}},
        })  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(volumes))
    api = cluster.api_client()
    found: dict[str, Any] = {"seconds": {}}
    started = time.monotonic()
    try:
        for command in quick_start_commands()[1:]:
            at = time.monotonic()
            found["last_output"] = shell(cluster, command)
            found["seconds"][command] = round(time.monotonic() - at, 1)
        FIGURES.record("readme_quick_start_after_helm_s", time.monotonic() - started)
        for command, seconds in found["seconds"].items():
            FIGURES.record(f"readme: {command.split('  #')[0].strip()}", seconds)
        custom = client.CustomObjectsApi(api)
        found["pool"] = custom.get_namespaced_custom_object(
            "kubecua.dev", "v1alpha1", "default", "sandboxpools", QS_POOL
        )
        found["run"] = custom.get_namespaced_custom_object(
            "kubecua.dev", "v1alpha1", "default", "trainingruns", QS_RUN
        )
        core = client.CoreV1Api(api)
        pods = core.list_namespaced_pod("default", label_selector=f"kubecua.dev/pool={QS_POOL}")
        found["sandboxes"] = [p for p in pods.items if pod_ready(p)]
        found["slices"] = _ready_addresses(
            client.DiscoveryV1Api(api)
            .list_namespaced_endpoint_slice("default", label_selector=f"kubecua.dev/pool={QS_POOL}")
            .items
        )
        found["nodes"] = {p.spec.node_name for p in core.list_namespaced_pod("default").items}
        found["checkpoints"] = sorted(p.name for p in (root / "checkpoints").iterdir())
        return found
    finally:
        cluster.kubectl(
            "delete", f"trainingrun/{QS_RUN}", f"sandboxpool/{QS_POOL}", "configmap/tasks",
            "-n", "default", "--ignore-not-found", "--timeout=120s", check=False, timeout=150,
        )  # fmt: skip
        cluster.kubectl(
            "delete", "-n", "default", "--ignore-not-found", "--timeout=120s",
            "-f", str(REPO / "examples" / "tiny-model.yaml"), check=False, timeout=150,
        )  # fmt: skip
        wait_for_objects(
            client.CoreV1Api(api).list_namespaced_pod, lambda pods: not pods, timeout=180,
            namespace="default",
        )  # fmt: skip
        cluster.kubectl("delete", "pv", *(v["metadata"]["name"] for v in volumes), check=False)


def test_readme_quick_start_runs_verbatim_the_pool_turns_ready_and_the_run_finishes(quick_start):
    pool = quick_start["pool"]["status"]
    assert pool["readyReplicas"] == QS_SANDBOXES, pool
    assert {c["type"]: c["status"] for c in pool["conditions"]}["Ready"] == "True", pool
    ips = {p.status.pod_ip for p in quick_start["sandboxes"]}
    assert len(ips) == QS_SANDBOXES
    assert quick_start["slices"] == ips  # the trainer's discovery: EndpointSlices by label
    run = quick_start["run"]["status"]
    assert run["phase"] == "Succeeded", run
    assert (run["step"], run["totalSteps"]) == (QS_STEPS, QS_STEPS), run
    assert 0.0 <= run["meanReward"] <= 1.0
    assert run["lastCheckpoint"]["step"] == QS_STEPS, run
    assert f"step-{QS_STEPS:08d}" in quick_start["checkpoints"], quick_start["checkpoints"]
    # Every pod it made (sandboxes, the model Job's, the trainer's) ran on the real node.
    assert quick_start["nodes"] == {real.NAME}, quick_start["nodes"]
    # The last line, `kubectl get sandboxpools,trainingruns`, shows both as a user sees them.
    table = quick_start["last_output"]
    assert re.search(
        rf"^sandboxpool\S*/{QS_POOL}\s+pod\s+{QS_SANDBOXES}\s+\d+\s+{QS_SANDBOXES}\b", table, re.M
    ), table
    assert re.search(
        rf"^trainingrun\S*/{QS_RUN}\s+Succeeded\s+{QS_POOL}\s+{QS_STEPS}\s+{QS_STEPS}\b",
        table,
        re.M,
    ), table


@pytest.fixture(scope="module")
def pool(cluster: Cluster, release) -> Iterator[str]:
    ns = "journey"
    cluster.kubectl("create", "namespace", ns)
    manifest = {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": POOL, "namespace": ns},
        "spec": {
            "replicas": SANDBOXES, "backend": "pod", "warmSpares": 0,
            "liveView": {"enabled": True},  # read-only; reached by port-forward alone
            "desktop": {"os": "Ubuntu", "screen": {"width": 1280, "height": 720},
                        "pod": {"image": "localhost/kubecua/sandbox:dev",
                                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                              "limits": {"memory": "3Gi"}}}},
        },
    }  # fmt: skip
    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    core = client.CoreV1Api(cluster.api_client())
    wait_for_objects(
        core.list_namespaced_pod,
        lambda pods: sum(pod_ready(p) for p in pods) == SANDBOXES,
        timeout=420,
        namespace=ns,
        label_selector=f"kubecua.dev/pool={POOL}",
    )
    FIGURES.record(f"pool_apply_to_{SANDBOXES}_ready_sandboxes_s", time.monotonic() - started)
    try:
        yield ns
    finally:
        # The kinds first, while the operator runs: it removes their finalizers. (Deleting the
        # namespace first leaves them stuck: the operator's re-creations get 403 there.)
        cluster.kubectl(
            "delete", "trainingruns,sandboxpools", "--all", "-n", ns, "--timeout=120s",
            check=False, timeout=150,
        )  # fmt: skip
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_sandbox_pods_run_pass_readiness_and_are_discovered_by_label(cluster, pool):
    api = cluster.api_client()
    # Readiness is the episode server's own /readyz (a screenshot must not be black); on a
    # loaded machine a probe can time out once, so wait for the condition rather than sample it.
    pods = wait_for_objects(
        client.CoreV1Api(api).list_namespaced_pod,
        lambda items: sum(pod_ready(p) for p in items) == SANDBOXES,
        timeout=120,
        namespace=pool,
        label_selector=f"kubecua.dev/pool={POOL}",
    )
    sandboxes = [p for p in pods if pod_ready(p)]
    assert len(sandboxes) == SANDBOXES
    assert {p.spec.node_name for p in sandboxes} == {real.NAME}
    ips = {p.status.pod_ip for p in sandboxes}
    # Discovery as the trainer does it: EndpointSlices by the pool's label, ready endpoints only.
    slices = wait_for_objects(
        client.DiscoveryV1Api(api).list_namespaced_endpoint_slice,
        lambda items: _ready_addresses(items) == ips,
        timeout=60,
        namespace=pool,
        label_selector=f"kubecua.dev/pool={POOL}",
    )
    assert _ready_addresses(slices) == ips
    for ip in ips:  # each sandbox's episode server really answers, from outside the pod
        assert httpx.get(f"http://{ip}:8000/readyz", timeout=10).status_code == 200
    cluster.kubectl(
        "wait", f"sandboxpool/{POOL}", "-n", pool, "--timeout=60s",
        f"--for=jsonpath={{.status.readyReplicas}}={SANDBOXES}",
    )  # fmt: skip


def _ready_addresses(slices) -> set[str]:
    return {
        addr
        for s in slices
        for ep in s.endpoints or []
        if ep.conditions is None or ep.conditions.ready is not False
        for addr in ep.addresses or []
    }


# ---- NetworkPolicies, enforced on the real node by kube-router ---------------------------------
# A TCP connect from inside a pod: "open", or the error that stopped it.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("open")
except OSError as err:
    print(f"blocked: {err!r}")
"""


def probe_pod(name: str, ns: str, labels: dict[str, str]) -> dict:
    """A pod that only waits, from the operator image (it has Python): `kubectl exec` connects
    from inside it."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "probe", "image": IMAGES[0],
                                 "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
                 "terminationGracePeriodSeconds": 0},
    }  # fmt: skip


def connect(cluster: Cluster, ns: str, pod: str, ip: str, port: int) -> str:
    argv = ("exec", "-n", ns, pod, "--", "python", "-c", CONNECT, ip, str(port))
    return str(cluster.kubectl(*argv, timeout=60).stdout).strip()


def test_pool_network_policy_admits_its_clients_and_refuses_other_pods(cluster, pool):
    """The pool's default-deny NetworkPolicy, enforced: a pod with the pool's client label (which
    the operator gives the trainer) reaches a sandbox's episode server; a pod without it does
    not, though it reaches the operator, which no policy guards. And a sandbox, whose pool lists
    no egress rules, reaches nothing: not even that operator (an agent's code runs in it)."""
    core = client.CoreV1Api(cluster.api_client())
    pods = core.list_namespaced_pod(pool, label_selector=f"kubecua.dev/pool={POOL}").items
    sandbox_pod = next(p for p in pods if pod_ready(p))
    sandbox = sandbox_pod.status.pod_ip
    operator = core.list_namespaced_pod(SYSTEM, label_selector=OPERATOR).items[0].status.pod_ip
    probes = {"stranger": {"app": "stranger"}, "client": {f"kubecua.dev/client-of-{POOL}": "true"}}
    for name, labels in probes.items():
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(probe_pod(name, pool, labels)))
    try:
        cluster.kubectl("wait", "-n", pool, "--for=condition=Ready", "--timeout=120s",
                        *(f"pod/{n}" for n in probes), timeout=150)  # fmt: skip
        # kube-router adds a new pod to the policy's sets on its pod event: allow it that moment.
        wait_until(
            lambda: connect(cluster, pool, "client", sandbox, 8000) == "open", 60,
            "the pool's client to reach a sandbox",
        )  # fmt: skip
        assert connect(cluster, pool, "stranger", operator, 8081) == "open"
        refused = connect(cluster, pool, "stranger", sandbox, 8000)
        assert refused.startswith("blocked:"), refused
        # The live view's port is closed even to the pool's clients: port-forward only.
        view = connect(cluster, pool, "client", sandbox, LIVE_VIEW_PORT)
        assert view.startswith("blocked:"), view
        egress = connect(cluster, pool, sandbox_pod.metadata.name, operator, 8081)
        assert egress.startswith("blocked:"), egress
    finally:
        cluster.kubectl("delete", "pod", "-n", pool, *probes, "--grace-period=0", check=False)


LIVE_VIEW_PORT = 6080


def websocket_status(port: int, token: str) -> str:
    """The status line a WebSocket upgrade to the live view gets (\"\" when it is closed)."""
    request = (f"GET /websockify?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")  # fmt: skip
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        return s.makefile("rb").readline().decode().strip()


def test_live_view_is_reached_by_port_forward_behind_the_pools_token(cluster, pool):
    """spec.liveView on the real node: `kubectl port-forward` to a sandbox's port 6080 serves
    noVNC, and its WebSocket opens for the pool's token only (docs/live-view.md)."""
    core = client.CoreV1Api(cluster.api_client())
    pod = next(p for p in core.list_namespaced_pod(pool, label_selector=f"kubecua.dev/pool={POOL}")
               .items if pod_ready(p))  # fmt: skip
    port = free_port()
    argv = [str(binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
            "-n", pool, f"pod/{pod.metadata.name}", f"{port}:{LIVE_VIEW_PORT}"]  # fmt: skip
    forward = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/vnc.html"), 60, "noVNC")
        assert websocket_status(port, sandbox_token(cluster, pool)) == (
            "HTTP/1.1 101 Switching Protocols")  # fmt: skip
        assert websocket_status(port, "not-the-token") == ""
    finally:
        forward.terminate()
        forward.wait(10)


# ---- the TrainingRun: a trainer pod on the real node, suspended and resumed ---------------------
RUN = "tiny"
# Steps enough that a suspend sent after step 1 arrives mid-run: a step takes about 1 s here,
# the suspend (status -> patch -> Job suspended -> SIGTERM) a few.
STEPS = 12
TASK = "count-lines"
HELD_OUT = "create-hello-file"
TRAINER_IMAGE = "localhost/kubecua/trainer:dev"


def host_volume(cluster: Cluster, ns: str, name: str, path: Path, read_only: bool) -> None:
    """A hostPath PersistentVolume on the real node and the claim bound to it by name."""
    pv: dict[str, Any] = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{ns}-{name}"},
        "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "",
                 "accessModes": ["ReadOnlyMany" if read_only else "ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(path), "type": "Directory"},
                 "claimRef": {"namespace": ns, "name": name}},
    }  # fmt: skip
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"storageClassName": "", "volumeName": f"{ns}-{name}",
                 "accessModes": pv["spec"]["accessModes"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pv, pvc]))


def trainingrun(ns: str) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": RUN, "namespace": ns},
        "spec": {
            "model": {"path": "/models/tiny-qwen2_5_vl", "volume": "models", "dtype": "float32"},
            # No tokenSecretRef: the trainer gets the token the operator made for the pool.
            "sandboxes": {"poolRef": POOL, "minReady": 1},
            "tasks": {"configMapRef": "tasks"},
            "evaluation": {"tasks": {"configMapRef": "heldout"}},  # 1 greedy episode, 2 times
            "algorithm": {"groupSize": 2, "tasksPerStep": 1, "maxTurns": 1, "maxNewTokens": 8,
                          "dynamicSampling": False},
            "rollout": {"engine": "hf", "maxPixels": 50176, "keepScreenshots": 1,
                        "episodeTimeoutSeconds": 240},
            "trainer": {"gradientCheckpointing": False,
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            # No periodic checkpoint before the last step: the first pod's is SIGTERM's.
            "checkpoint": {"volume": "checkpoints", "path": "/ckpt", "everySteps": 100},
            "steps": STEPS,
            "metrics": {"port": 9400},
            "cost": {"pricePerSandboxHour": 0.25, "pricePerGpuHour": 2.5},  # money in status
        },
    }  # fmt: skip


def run_status(cluster: Cluster, ns: str) -> dict:
    obj = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        "kubecua.dev", "v1alpha1", ns, "trainingruns", RUN
    )
    return obj.get("status") or {}


def wait_run(cluster: Cluster, ns: str, jsonpath: str, timeout: int) -> None:
    cluster.kubectl(
        "wait", f"trainingrun/{RUN}", "-n", ns, f"--for=jsonpath={jsonpath}",
        f"--timeout={timeout}s", timeout=timeout + 30,
    )  # fmt: skip


def trainer_pods(cluster: Cluster, ns: str) -> list:
    core = client.CoreV1Api(cluster.api_client())
    return core.list_namespaced_pod(ns, label_selector=f"kubecua.dev/trainingrun={RUN}").items


def wait_trainer_pods(cluster: Cluster, ns: str, done) -> list:
    """Waits (on a watch) until the run's trainer pods satisfy `done`; returns them."""
    return wait_for_objects(
        client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
        done,
        timeout=300,
        namespace=ns,
        label_selector=f"kubecua.dev/trainingrun={RUN}",
    )


class LogFollower:
    """`kubectl logs -f` of one pod into a file, so its log outlives the pod."""

    def __init__(self, cluster: Cluster, ns: str, pod: str, path: Path) -> None:
        self.path = path
        self.out = path.open("wb")
        argv = [str(binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "logs", "-f",
                "-n", ns, pod]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT)

    def text(self, timeout: float = 60) -> str:
        """The whole log once the container has exited (the stream ends then)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        return self.path.read_text(errors="replace")


@pytest.fixture(scope="module")
def prometheus(cluster: Cluster, release, tmp_path_factory) -> Iterator[str]:
    """Debian's Prometheus on the host, scraping every second through service discovery with the
    chart's own ServiceMonitor and PodMonitor (trainers included) as scrape configs."""
    if not Path("/usr/bin/prometheus").exists():
        pytest.skip("prometheus is missing: `make setup-apt` installs Debian's package")
    tmp = tmp_path_factory.mktemp("prometheus")
    rendered = cluster.helm(
        "template", "kubecua", str(REPO / "charts/kubecua"), "-n", SYSTEM,
        "--set", "serviceMonitor.enabled=true,podMonitor.enabled=true",
        "--set", "podMonitor.includeTrainers=true",
        "--show-only", "templates/servicemonitor.yaml", "--show-only", "templates/podmonitor.yaml",
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    (tmp / "targets").mkdir()
    conf = {"global": {"scrape_interval": "1s"},
            "scrape_configs": scrape_configs(docs, tmp / "targets")}  # fmt: skip
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(conf))
    discovery = Discovery(docs, cluster.api_client(), tmp / "targets").start()
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        ["/usr/bin/prometheus", f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is None and http_ok(f"{api}/-/ready"), 60, "prometheus")
        yield api
    finally:
        discovery.stop()
        proc.terminate()
        proc.wait(30)
        log.close()


@pytest.fixture(scope="module")
def training(cluster: Cluster, pool: str, prometheus: str, tmp_path_factory) -> dict:
    """The run: step 1 (or a few) in a first trainer pod, suspend (SIGTERM: checkpoint), resume,
    the remaining steps in a second pod."""
    if TRAINER_IMAGE not in node_images(cluster):
        pytest.skip(f"{TRAINER_IMAGE} is not built: `make test-e2e` (or `make images`) builds it")
    model = cache_dir() / "models" / "tiny-qwen2_5_vl"
    if not (model / "config.json").exists():
        pytest.skip(f"{model} is missing: `make test-e2e` builds it")
    root = tmp_path_factory.mktemp("journey")
    shutil.copytree(model, root / "models" / "tiny-qwen2_5_vl")
    (root / "ckpt").mkdir()
    os.chown(root / "ckpt", 65532, 65532)  # the trainer image's user, as its Job runs it
    for d in (root, root / "models"):
        d.chmod(0o755)
    for f in (root / "models" / "tiny-qwen2_5_vl").iterdir():
        f.chmod(0o644)  # safetensors writes its file 0600; the pod does not run as root
    host_volume(cluster, pool, "models", root / "models", read_only=True)
    host_volume(cluster, pool, "checkpoints", root / "ckpt", read_only=False)
    task = REPO / "sandbox-image" / "tasks" / "files" / f"{TASK}.json"
    cluster.kubectl("create", "configmap", "tasks", "-n", pool, f"--from-file={task}")
    held_out = task.with_name(f"{HELD_OUT}.json")
    cluster.kubectl("create", "configmap", "heldout", "-n", pool, f"--from-file={held_out}")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(trainingrun(pool)))

    pods = wait_trainer_pods(cluster, pool, lambda ps: any(p.status.phase == "Running" for p in ps))
    first = next(p for p in pods if p.status.phase == "Running")
    first_log = LogFollower(cluster, pool, first.metadata.name, root / "trainer-1.log")
    wait_run(cluster, pool, "{.status.step}=1", timeout=600)
    started = first.status.container_statuses[0].state.running.started_at
    FIGURES.record("trainer_start_to_step_1_s", time.time() - started.timestamp())

    cluster.kubectl("patch", f"trainingrun/{RUN}", "-n", pool, "--type=merge",
                    "-p", '{"spec": {"suspend": true}}')  # fmt: skip
    wait_trainer_pods(cluster, pool, lambda ps: not ps)
    suspended = run_status(cluster, pool)
    cluster.kubectl("patch", f"trainingrun/{RUN}", "-n", pool, "--type=merge",
                    "-p", '{"spec": {"suspend": false}}')  # fmt: skip
    pods = wait_trainer_pods(cluster, pool, lambda ps: any(p.status.phase == "Running" for p in ps))
    second = next(p for p in pods if p.status.phase == "Running")
    second_log = LogFollower(cluster, pool, second.metadata.name, root / "trainer-2.log")
    wait_run(cluster, pool, "{.status.phase}=Succeeded", timeout=600)
    end = time.time()
    leases = episode_server_leases(cluster, pool)  # before anything else leases them
    table = str(cluster.kubectl("get", f"trainingrun/{RUN}", "-n", pool, "-o", "wide").stdout)
    wait_until(lambda: _scraped_after(prometheus, end), 30, "a scrape after the run")
    return {
        "start": first.status.start_time.timestamp(),
        "end": end,
        "ns": pool,
        "pods": [first, second],
        "logs": [first_log.text(), second_log.text()],
        "suspended": suspended,
        "final": run_status(cluster, pool),
        "ckpt": root / "ckpt",
        "leases": leases,
        "table": table,
    }


def episode_server_leases(cluster: Cluster, ns: str) -> dict[str, float]:
    """The pool's leases as its episode servers count them (their open /metrics, read from the
    host at each pod's IP): summed seconds and how many."""
    core = client.CoreV1Api(cluster.api_client())
    total = {"seconds": 0.0, "leases": 0.0}
    for pod in core.list_namespaced_pod(ns, label_selector=f"kubecua.dev/pool={POOL}").items:
        text = httpx.get(f"http://{pod.status.pod_ip}:8000/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith("kubecua_sandbox_lease_duration_seconds_sum "):
                total["seconds"] += float(line.split()[-1])
            elif line.startswith("kubecua_sandbox_lease_duration_seconds_count "):
                total["leases"] += float(line.split()[-1])
    return total


def test_trainer_pod_trains_its_grpo_steps_on_the_real_node_and_patches_status(training):
    assert {p.spec.node_name for p in training["pods"]} == {real.NAME}
    status = training["final"]
    assert (status["step"], status["totalSteps"]) == (STEPS, STEPS)
    assert 0.0 <= status["meanReward"] <= 1.0
    ready = next(c for c in status["conditions"] if c["type"] == "SandboxesReady")
    assert ready["status"] == "True"
    # The evaluation after the last step, as the trainer pod patched it.
    evaluation = status["evaluation"]
    assert (evaluation["step"], evaluation["episodes"] + evaluation["excluded"]) == (STEPS, 1)
    assert [t["id"] for t in evaluation["tasks"]] == [HELD_OUT]


def test_recorded_sandbox_seconds_agree_with_the_leases_the_episode_servers_report(training):
    """status.cost (kubecua_trainer/telemetry/cost.py), over both trainer pods of the suspended
    and resumed run, against the episode servers' own lease histograms: every lease of the run
    (training, the two evaluations, and what the suspend abandoned) is counted once. The trainer
    times a lease from its start request to its release's answer, the server from receiving
    the start to the verified reset: the trainer's is longer by the round trips only."""
    cost, servers = training["final"]["cost"], training["leases"]
    assert cost["trajectories"] == STEPS * 2  # groupSize 2, 1 task a step; none played twice
    assert servers["leases"] >= cost["trajectories"] + 2  # and the 2 evaluation episodes
    # Round trips and the trainer's busy event loop (a CPU learner beside it): up to 300 ms a
    # lease on a loaded 2-core machine (100 ms was exceeded at load average 14). A lease counted
    # twice would add a whole episode, seconds, so the bound still catches double counting.
    slack = 2.0 + 0.3 * servers["leases"]
    assert servers["seconds"] <= cost["sandboxSeconds"] <= servers["seconds"] + slack, (
        cost, servers)  # fmt: skip
    assert cost["gpuSeconds"] == 0.0  # a CPU run holds no GPU
    per = cost["sandboxSeconds"] / cost["trajectories"]
    assert cost["sandboxSecondsPerTrajectory"] == pytest.approx(per, abs=1e-3)
    money = cost["sandboxSeconds"] / 3600 * 0.25  # at the spec's 0.25 a sandbox-hour
    assert (cost["currency"], cost["total"]) == ("USD", pytest.approx(money, abs=1e-5))
    # `kubectl get -o wide` shows the per-trajectory columns.
    header = training["table"].splitlines()[0].split()
    assert {"COST/SUCCESS", "SANDBOX-S/TRAJ", "GPU-S/TRAJ"} <= set(header), training["table"]


def test_suspend_sigterms_the_trainer_which_checkpoints_and_the_new_pod_resumes(training):
    first, second = training["logs"]
    # The suspend came after step 1 and before the last step (the run is long enough for the
    # SIGTERM to arrive mid-run); everySteps is 100, so the step-k checkpoint is SIGTERM's.
    k = training["suspended"]["lastCheckpoint"]["step"]
    assert 1 <= k < STEPS, training["suspended"]
    assert f"checkpoint of step {k} written" in first, first[-3000:]
    assert f"stopped by SIGTERM after step {k}" in first, first[-3000:]
    assert training["suspended"]["phase"] == "Suspended"
    # The stopped pod exits 143 (stopped, not finished) under the Job's podFailurePolicy: a suspend
    # counts no failure, neither then nor by the end of the run.
    assert training["suspended"].get("restarts", 0) == 0, training["suspended"]
    assert training["final"].get("restarts", 0) == 0, training["final"]
    # The new pod resumed from that checkpoint: it trained step k + 1 and never step k again.
    assert re.search(rf"^step {k + 1}:", second, re.M), second[-3000:]
    assert not re.search(rf"^step {k}:", second, re.M), second[-3000:]
    assert (training["ckpt"] / f"step-{k:08d}").is_dir()


def _scraped_after(api: str, at: float) -> bool:
    r = httpx.get(f"{api}/api/v1/query", params={"query": "max(timestamp(up))"}, timeout=10)
    result = r.json()["data"]["result"]
    return bool(result) and float(result[0]["value"][1]) > at


def test_prometheus_scrapes_operator_sandboxes_and_trainer_through_the_chart_monitors(
    training, prometheus
):
    ups = query_range(prometheus, "up == 1", training["start"], training["end"])
    jobs: dict[str, set[str]] = {}
    for series in ups:
        labels = series["metric"]
        jobs.setdefault(labels["job"].split("/")[0], set()).add(labels.get("pod", ""))
    assert len(jobs["serviceMonitor"]) == 1  # the operator, through its Service
    pods = jobs["podMonitor"]
    # (At least: a sandbox that failed and was replaced would be a further target.)
    assert sum(p.startswith(f"{POOL}-") for p in pods) >= SANDBOXES
    assert sum(p.startswith(f"{RUN}-trainer") for p in pods) >= 2  # before and after suspend


def test_training_dashboard_queries_return_the_runs_series(training, prometheus):
    board = json.loads((REPO / "charts/kubecua/dashboards/kubecua-training.json").read_text())
    empty = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$namespace", training["ns"])
            expr = expr.replace("$__rate_interval", "15s")
            found = query_range(prometheus, expr, training["start"], training["end"])
            if not any(v != "NaN" for s in found for _, v in s["values"]):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, empty
    steps = query_range(
        prometheus, f'max(kubecua_trainer_step{{namespace="{training["ns"]}"}})',
        training["start"], training["end"],
    )  # fmt: skip
    assert max(float(v) for s in steps for _, v in s["values"]) == STEPS


# ---- faults on the real node, each judged by the records it leaves -----------------------------
# A second run on the journey's pool, with episodes long enough (8 turns of up to 256 tokens: the
# random model's replies are invalid, so each turn is text feedback) that a sandbox deleted while
# it holds an episode goes away mid-episode, and a checkpoint after every step.
FAULT_RUN, FAULT_STEPS = "faults", 8


def fault_run(ns: str) -> dict:
    run = trainingrun(ns)
    run["metadata"]["name"] = FAULT_RUN
    spec = run["spec"]
    del spec["evaluation"]
    spec["algorithm"].update(maxTurns=8, maxNewTokens=256)
    spec["checkpoint"] = {"volume": "faults-ckpt", "path": "/ckpt", "everySteps": 1}
    spec["steps"] = FAULT_STEPS
    return run


def sandbox_token(cluster: Cluster, ns: str) -> str:
    core = client.CoreV1Api(cluster.api_client())
    secret = next(
        s for s in core.list_namespaced_secret(ns).items
        if s.metadata.name.startswith(f"{POOL}-sandbox-token-")
    )  # fmt: skip
    return base64.b64decode(secret.data["token"]).decode()


def episodes_in_flight(cluster: Cluster, ns: str, token: str) -> dict[str, tuple[str, str]]:
    """pod name -> (pod IP, episode id) of every ready sandbox holding an episode now, from the
    episode servers' own GET /status."""
    core = client.CoreV1Api(cluster.api_client())
    found = {}
    for pod in core.list_namespaced_pod(ns, label_selector=f"kubecua.dev/pool={POOL}").items:
        if not pod_ready(pod) or pod.metadata.deletion_timestamp:
            continue
        ip = pod.status.pod_ip
        try:
            status = httpx.get(f"http://{ip}:8000/status", timeout=5,
                               headers={"Authorization": f"Bearer {token}"}).json()  # fmt: skip
        except httpx.HTTPError:
            continue
        if status.get("episode_id"):
            found[pod.metadata.name] = (ip, status["episode_id"])
    return found


def wait_in_flight(cluster: Cluster, ns: str, token: str) -> dict[str, tuple[str, str]]:
    box: dict[str, dict] = {}

    def any_in_flight() -> bool:
        box["found"] = episodes_in_flight(cluster, ns, token)
        return bool(box["found"])

    wait_until(any_in_flight, 300, "a sandbox holding an episode")
    return box["found"]


def kill_operator(cluster: Cluster) -> str:
    """SIGKILL the operator's process from the host (no SIGTERM, no clean-up); its container id."""
    core = client.CoreV1Api(cluster.api_client())
    return kill_container(core.list_namespaced_pod(SYSTEM, label_selector=OPERATOR).items[0])


def kill_container(pod: client.V1Pod) -> str:
    """SIGKILL a pod's first container's process from the host, at once: the kubelet's own
    stop waits for its next sync, seconds on a loaded machine; its container id."""
    container = pod.status.container_statuses[0].container_id.split("://")[1]
    sock = real.RUN_DIR / "containerd.sock"
    tasks = subprocess.run(
        ["ctr", "--address", str(sock), "-n", "k8s.io", "tasks", "ls"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pid = next(int(line.split()[1]) for line in tasks.splitlines() if line.startswith(container))
    os.kill(pid, signal.SIGKILL)
    return container


def children(cluster: Cluster, ns: str, selector: str) -> dict[str, list]:
    """Every object of the kinds the operator makes that carries this label, by kind."""
    api = cluster.api_client()
    core, apps = client.CoreV1Api(api), client.BatchV1Api(api)
    rbac, net = client.RbacAuthorizationV1Api(api), client.NetworkingV1Api(api)
    listers = {
        "Pod": core.list_namespaced_pod, "Service": core.list_namespaced_service,
        "ConfigMap": core.list_namespaced_config_map, "Secret": core.list_namespaced_secret,
        "ServiceAccount": core.list_namespaced_service_account,
        "Job": apps.list_namespaced_job, "Role": rbac.list_namespaced_role,
        "RoleBinding": rbac.list_namespaced_role_binding,
        "NetworkPolicy": net.list_namespaced_network_policy,
    }  # fmt: skip
    return {
        kind: [o for o in lister(ns, label_selector=selector).items
               if not o.metadata.deletion_timestamp]
        for kind, lister in listers.items()
    }  # fmt: skip


@pytest.fixture(scope="module")
def faults(cluster: Cluster, pool: str, training: dict, tmp_path_factory) -> dict:
    """Three faults, one after another, on one run: (3) the operator SIGKILLed while the pool
    scales 3 -> 4 and the run's children are being made; (1) a sandbox pod deleted while it holds
    one of the run's episodes; (2) the trainer pod deleted mid-step (kubectl delete pod: the
    Job is not suspended, its controller replaces the pod). What each left behind is returned."""
    ns, core = pool, client.CoreV1Api(cluster.api_client())
    custom = client.CustomObjectsApi(cluster.api_client())
    root = tmp_path_factory.mktemp("faults")
    (root / "ckpt").mkdir()
    os.chown(root / "ckpt", 65532, 65532)
    host_volume(cluster, ns, "faults-ckpt", root / "ckpt", read_only=False)
    token = sandbox_token(cluster, ns)
    out: dict[str, Any] = {"ckpt": root / "ckpt"}

    # (3) The operator killed while it scales the pool and makes the run's children.
    cluster.kubectl("patch", f"sandboxpool/{POOL}", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"replicas": 4}}')  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(fault_run(ns)))
    killed_at = time.monotonic()
    kill_operator(cluster)
    out["at_kill"] = {
        k: len(v) for k, v in children(cluster, ns, f"kubecua.dev/trainingrun={FAULT_RUN}").items()
    }
    out["pool_pods_at_kill"] = len(
        core.list_namespaced_pod(ns, label_selector=f"kubecua.dev/pool={POOL}").items
    )
    operator = wait_for_objects(
        core.list_namespaced_pod,
        lambda pods: any(pod_ready(p) and p.status.container_statuses[0].restart_count >= 1
                         for p in pods),
        timeout=180, namespace=SYSTEM, label_selector=OPERATOR,
    )  # fmt: skip
    out["operator_restarts"] = operator[0].status.container_statuses[0].restart_count
    wait_for_objects(
        core.list_namespaced_pod, lambda pods: sum(pod_ready(p) for p in pods) == 4, timeout=420,
        namespace=ns, label_selector=f"kubecua.dev/pool={POOL}",
    )  # fmt: skip
    FIGURES.record("operator_kill_to_pool_of_4_ready_s", time.monotonic() - killed_at)
    pods = wait_trainer_pods_of(
        cluster, ns, FAULT_RUN, lambda ps: any(p.status.phase == "Running" for p in ps)
    )
    first = next(p for p in pods if p.status.phase == "Running")
    first_log = LogFollower(cluster, ns, first.metadata.name, root / "trainer-1.log")
    out["pool_children"] = children(cluster, ns, f"kubecua.dev/pool={POOL}")
    out["run_children"] = children(cluster, ns, f"kubecua.dev/trainingrun={FAULT_RUN}")
    out["pool_uid"] = custom.get_namespaced_custom_object(
        "kubecua.dev", "v1alpha1", ns, "sandboxpools", POOL
    )["metadata"]["uid"]
    out["run_uid"] = custom.get_namespaced_custom_object(
        "kubecua.dev", "v1alpha1", ns, "trainingruns", FAULT_RUN
    )["metadata"]["uid"]

    # (1) A sandbox pod deleted while it holds one of the run's episodes.
    wait_fault_run(cluster, ns, "{.status.step}=1", timeout=600)
    held = wait_in_flight(cluster, ns, token)
    name, (ip, episode) = next(iter(held.items()))
    lost_pod = core.read_namespaced_pod(name, ns)
    lost_uid = lost_pod.metadata.uid
    # Killed from the host first, so the episode cannot finish in the seconds a loaded kubelet
    # takes to act on the deletion (it once did, at load average 14: nothing was lost).
    kill_container(lost_pod)
    cluster.kubectl("delete", "pod", name, "-n", ns, "--grace-period=1", "--wait=false")
    out["lost"] = {"pod": name, "ip": ip, "episode": episode, "uid": lost_uid}
    # The operator makes a replacement at once; whether the node runs it soon is the node's
    # business (a shared machine's disk pressure once kept one Pending), so it is checked at the
    # end, and training goes on meanwhile on the other sandboxes.
    wait_for_objects(
        core.list_namespaced_pod,
        lambda pods: len(pods) == 4 and lost_uid not in {p.metadata.uid for p in pods},
        timeout=120, namespace=ns, label_selector=f"kubecua.dev/pool={POOL}",
    )  # fmt: skip
    step_lost = int(run_status_of(cluster, ns, FAULT_RUN).get("step", 0))

    # (2) The trainer pod deleted mid-step, while episodes run.
    wait_fault_run(cluster, ns, f"{{.status.step}}={step_lost + 1}", timeout=600)
    held = wait_in_flight(cluster, ns, token)
    cluster.kubectl("delete", "pod", first.metadata.name, "-n", ns, "--wait=false")
    out["trainer_held"] = held
    wait_trainer_pods_of(
        cluster, ns, FAULT_RUN, lambda ps: first.metadata.name not in {p.metadata.name for p in ps}
    )  # fmt: skip
    # Right after the old pod is gone, before a new one could start an episode: what each
    # sandbox it held now holds (the episode servers' own record).
    out["after_trainer_gone"] = episodes_in_flight(cluster, ns, token)
    out["released_logs"] = {
        pod: str(cluster.kubectl("logs", "-n", ns, pod, timeout=60).stdout)
        for pod in held
    }  # fmt: skip
    pods = wait_trainer_pods_of(
        cluster, ns, FAULT_RUN,
        lambda ps: any(p.status.phase == "Running" and p.metadata.name != first.metadata.name
                       for p in ps),
    )  # fmt: skip
    second = next(p for p in pods if p.status.phase == "Running")
    second_log = LogFollower(cluster, ns, second.metadata.name, root / "trainer-2.log")
    wait_fault_run(cluster, ns, "{.status.phase}=Succeeded", timeout=900)
    out["logs"] = [first_log.text(), second_log.text()]
    replaced = wait_for_objects(
        core.list_namespaced_pod, lambda pods: sum(pod_ready(p) for p in pods) == 4, timeout=420,
        namespace=ns, label_selector=f"kubecua.dev/pool={POOL}",
    )  # fmt: skip
    out["pool_after_loss"] = {p.metadata.uid for p in replaced}
    out["final"] = run_status_of(cluster, ns, FAULT_RUN)
    out["trainer_pods"] = [first, second]
    out["job"] = client.BatchV1Api(cluster.api_client()).read_namespaced_job(
        f"{FAULT_RUN}-trainer", ns
    )
    cluster.kubectl("delete", f"trainingrun/{FAULT_RUN}", "-n", ns, "--timeout=120s", timeout=150)
    # Scale back in: exactly the 3 remain, and nothing of the run is left behind.
    cluster.kubectl("patch", f"sandboxpool/{POOL}", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"replicas": 3}}')  # fmt: skip
    wait_for_objects(
        core.list_namespaced_pod, lambda pods: len(pods) == 3, timeout=180,
        namespace=ns, label_selector=f"kubecua.dev/pool={POOL}",
    )  # fmt: skip
    wait_for_objects(
        core.list_namespaced_pod, lambda pods: not pods, timeout=180,
        namespace=ns, label_selector=f"kubecua.dev/trainingrun={FAULT_RUN}",
    )  # fmt: skip
    out["pool_children_after"] = children(cluster, ns, f"kubecua.dev/pool={POOL}")
    out["run_children_after"] = children(cluster, ns, f"kubecua.dev/trainingrun={FAULT_RUN}")
    return out


def run_status_of(cluster: Cluster, ns: str, name: str) -> dict:
    obj = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        "kubecua.dev", "v1alpha1", ns, "trainingruns", name
    )
    return obj.get("status") or {}


def wait_fault_run(cluster: Cluster, ns: str, jsonpath: str, timeout: int) -> None:
    cluster.kubectl(
        "wait", f"trainingrun/{FAULT_RUN}", "-n", ns, f"--for=jsonpath={jsonpath}",
        f"--timeout={timeout}s", timeout=timeout + 30,
    )  # fmt: skip


def wait_trainer_pods_of(cluster: Cluster, ns: str, run: str, done) -> list:
    return wait_for_objects(
        client.CoreV1Api(cluster.api_client()).list_namespaced_pod, done, timeout=300,
        namespace=ns, label_selector=f"kubecua.dev/trainingrun={run}",
    )  # fmt: skip


def owned_by(obj, uid: str) -> bool:
    return any(ref.uid == uid for ref in obj.metadata.owner_references or [])


def test_operator_killed_while_scaling_leaves_no_duplicate_and_no_orphan(faults):
    assert faults["operator_restarts"] >= 1  # it was killed, and its container restarted
    pool = faults["pool_children"]
    sandboxes = pool["Pod"]
    names = [p.metadata.name for p in sandboxes]
    assert len(names) == len(set(names)) == 4, names  # 4 wanted: no duplicate sandbox
    assert all(owned_by(p, faults["pool_uid"]) for p in sandboxes), names  # no orphan
    services = sorted(s.metadata.name for s in pool["Service"])
    assert services == sorted(names), (services, names)  # one Service per sandbox, no more
    assert all(owned_by(s, faults["pool_uid"]) for s in pool["Service"])
    run = faults["run_children"]
    for kind, objects in run.items():  # by name: no kind holds two of one name
        names_of = [o.metadata.name for o in objects]
        assert len(names_of) == len(set(names_of)), (kind, names_of)
    for kind in ("Job", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy"):
        assert len(run[kind]) == 1, (kind, [o.metadata.name for o in run[kind]])
        assert owned_by(run[kind][0], faults["run_uid"]), kind
    # Scaled back to 3 and the run deleted: 3 sandboxes, their 3 Services, nothing of the run.
    after = faults["pool_children_after"]
    assert len(after["Pod"]) == len(after["Service"]) == 3, after
    assert not any(faults["run_children_after"].values()), faults["run_children_after"]


def _episodes(ckpt: Path) -> list[dict]:
    rows = []
    for path in sorted((ckpt / "run" / "episodes").glob("step-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def test_sandbox_deleted_mid_episode_is_excluded_and_another_takes_over(faults):
    lost = faults["lost"]
    rows = _episodes(faults["ckpt"])
    on_lost = [r for r in rows if f"//{lost['ip']}:" in r["sandbox"]]
    # The episode it held: an infrastructure failure, excluded, no reward and no sample to learn
    # from (records.EXCLUDED; never trained as a 0).
    excluded = [r for r in on_lost if r["outcome"] in ("sandbox_lost", "setup_failed")]
    assert excluded, on_lost
    assert all(r["reward"] is None and r["samples"] == 0 and r["detail"] for r in excluded)
    step = excluded[-1]["step"]
    history = {
        int(r["step"]): r
        for r in map(
            json.loads, (faults["ckpt"] / "run" / "history.jsonl").read_text().splitlines()
        )
    }
    assert history[step]["excluded"] >= 1, history[step]
    # The steps after it were played on the other sandboxes (the replacement among them), scored.
    later = [r for r in rows if r["step"] > step]
    assert later, rows
    scored = [r for r in later if r["outcome"] in ("success", "failure")]
    assert all(f"//{lost['ip']}:" not in r["sandbox"] for r in scored), later
    assert any(r["outcome"] in ("success", "failure") for r in later)
    # The pool replaced the deleted sandbox: 4 ready again, the lost pod not among them.
    assert len(faults["pool_after_loss"]) == 4
    assert lost["uid"] not in faults["pool_after_loss"]
    assert faults["final"]["step"] == FAULT_STEPS


def test_trainer_pod_deleted_mid_step_resumes_from_its_checkpoint_and_hands_sandboxes_back(faults):
    first, second = faults["logs"]
    match = re.search(r"stopped by SIGTERM after step (\d+)", first)
    assert match, first[-3000:]
    k = int(match.group(1))
    assert re.search(rf"^step {k + 1}:", second, re.M), second[-3000:]
    assert not re.search(rf"^step {k}:", second, re.M), second[-3000:]
    assert f"checkpoint of step {k} written" in first, first[-3000:]  # (pruned later: keep)
    # Deleted, not failed: the Job replaced it without counting a failure.
    assert faults["final"].get("restarts", 0) == 0, faults["final"]
    assert (faults["final"]["phase"], faults["final"]["step"]) == ("Succeeded", FAULT_STEPS)
    assert (faults["job"].status.failed or 0) == 0
    # Each episode it held was handed back: the episode server holds it no more once the pod is
    # gone (long before its 600 s idle timeout), and logged its release.
    for pod, (_, episode) in faults["trainer_held"].items():
        now = faults["after_trainer_gone"].get(pod, ("", None))[1]
        assert now != episode, (pod, episode)
        released = [line for line in faults["released_logs"][pod].splitlines()
                    if episode in line and "released" in line]  # fmt: skip
        assert released, faults["released_logs"][pod][-2000:]
