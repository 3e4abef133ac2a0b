"""The README's cluster quick start on a real node: pods that really run (containerd + runc,
kubelet and kube-proxy built from the pinned k8s.io/kubernetes; kubecua_testkit.node).

- `helm install` the chart: the operator pod runs on the real node and becomes Ready, and it
  answers its health endpoint at its pod IP;
- a pod-backend SandboxPool from the sandbox image: the pods run the image's real desktop and
  episode server, pass their readiness, and their EndpointSlices (found by the pool's label, as
  the trainer finds them) list exactly their pod IPs, which answer /readyz;
- a TrainingRun with the tiny model on the CPU (hostPath PersistentVolumes for the model and the
  checkpoints): its trainer pod plays episodes against those sandboxes over the pod network and
  patches the run's status; suspended after step 1, the pod gets SIGTERM and checkpoints the
  step it is at; resumed, a new pod trains the rest from that checkpoint; a held-out task is
  evaluated before step 1 and after the last step, and the last evaluation reaches
  status.evaluation;
- Debian's Prometheus scrapes the operator, the sandboxes and the trainer pods chosen by the
  chart's ServiceMonitor and PodMonitor, and every query of the training dashboard returns the
  run's series.

The NetworkPolicies the operator creates are enforced (kube-router's policy controller): a pod
without the pool's client label is refused by the sandboxes, while the trainer reaches them. The
kwok node of this cluster is tainted, so nothing lands there by
accident; every pod is asserted to be on the real node. Timings go to
$KUBECUA_CACHE/node/journey-figures.json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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
FIGURES: dict[str, float] = {}


def record(name: str, seconds: float) -> None:
    FIGURES[name] = round(seconds, 1)
    path = cache_dir() / "node" / "journey-figures.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(FIGURES, indent=1))


def ready(pod) -> bool:
    conds = pod.status.conditions or []
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in conds
    )


@pytest.fixture(scope="module")
def cluster(real_node_cluster: Cluster) -> Cluster:
    node = client.CoreV1Api(real_node_cluster.api_client()).read_node(real.NAME)
    refs = {tag for image in node.status.images or [] for tag in image.names or []}
    missing = [i for i in IMAGES if i not in refs]
    if missing:  # `make test-e2e` builds them first; a bare pytest run may not have
        pytest.skip(f"images {missing} are not built: run `make images`")
    return real_node_cluster


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[None]:
    started = time.monotonic()
    cluster.helm(
        "install", "kubecua", str(REPO / "charts/kubecua"), "-n", SYSTEM, "--create-namespace",
        "--set", "operator.resyncSeconds=2", "--wait", "--timeout", "300s",
    )  # fmt: skip
    wait_for_objects(
        client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
        lambda pods: any(ready(p) for p in pods),
        timeout=120,
        namespace=SYSTEM,
        label_selector=OPERATOR,
    )
    record("helm_install_to_operator_ready_s", time.monotonic() - started)
    try:
        yield
    finally:
        cluster.helm("uninstall", "kubecua", "-n", SYSTEM, "--wait", check=False)


def test_operator_pod_runs_and_is_ready_on_the_real_node(cluster, release):
    core = client.CoreV1Api(cluster.api_client())
    operator = core.list_namespaced_pod(SYSTEM, label_selector=OPERATOR).items
    assert len(operator) == 1
    pod = operator[0]
    assert pod.spec.node_name == real.NAME
    assert ready(pod)
    state = pod.status.container_statuses[0]
    assert state.state.running is not None
    assert state.restart_count == 0
    # The pod network is real: its health endpoint answers at the pod's own IP.
    assert pod.status.pod_ip.startswith("10.244.")
    r = httpx.get(f"http://{pod.status.pod_ip}:8081/healthz", timeout=10)
    assert r.status_code == 200


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
        lambda pods: sum(ready(p) for p in pods) == SANDBOXES,
        timeout=420,
        namespace=ns,
        label_selector=f"kubecua.dev/pool={POOL}",
    )
    record(f"pool_apply_to_{SANDBOXES}_ready_sandboxes_s", time.monotonic() - started)
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
        lambda items: sum(ready(p) for p in items) == SANDBOXES,
        timeout=120,
        namespace=pool,
        label_selector=f"kubecua.dev/pool={POOL}",
    )
    sandboxes = [p for p in pods if ready(p)]
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
    sandbox_pod = next(p for p in pods if ready(p))
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
        egress = connect(cluster, pool, sandbox_pod.metadata.name, operator, 8081)
        assert egress.startswith("blocked:"), egress
    finally:
        cluster.kubectl("delete", "pod", "-n", pool, *probes, "--grace-period=0", check=False)


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


def node_images(cluster: Cluster) -> set[str]:
    node = client.CoreV1Api(cluster.api_client()).read_node(real.NAME)
    return {tag for image in node.status.images or [] for tag in image.names or []}


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
    record("trainer_start_to_step_1_s", time.time() - started.timestamp())

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
    }


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
