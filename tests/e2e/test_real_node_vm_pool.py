"""A VM pool of one on the real node (docs/vm-desktops.md): the pod backend's `desktop.vm` mode.

The chart installs the operator (its admission guard in effect, so the pod the operator writes
passes it as the operator's ServiceAccount). The pool's pod runs the runner image
(localhost/kubecua/sandbox-vm-runner:dev, `make vm-runner`): qemu boots the VM disk (`make
vm-disk`, from a read-only hostPath PersistentVolume) on a copy-on-write overlay in the pod's
emptyDir, under qemu's emulator (this machine's KVM is kvm_pvm: no stock kernel boots on it),
and snapshots it once ready; the episode server beside it drives the guest's desktop server.

- the VM boots and the pod's /readyz turns ready; the guest's desktop is not reachable from
  outside the pod (the runner binds it to the pod's loopback);
- the pool's EndpointSlice lists the pod, ready;
- the offline suite's settings-dark-style task scores 1 with its reference; released, the VM is
  restored from its snapshot, and the no-op scores 0 (the reference's dconf change is gone,
  which no clean-up of a remote desktop could undo); restored again, the reference scores 1.

Timings go to $KUBECUA_CACHE/node/vm-pool-figures.json.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from kubecua_testkit import node as real
from kubecua_testkit.cluster import Cluster, node_for
from kubecua_testkit.components import wait_until
from kubecua_testkit.node_tests import Figures, pod_ready
from kubecua_testkit.tools import REPO, cache_dir, run
from kubecua_testkit.wait import wait_for_objects

# The node's start and image imports, then one boot under qemu's emulator (about a minute alone
# on this machine, several when it is loaded) and three episodes of a GUI task in the guest.
pytestmark = pytest.mark.timeout(2400)
SYSTEM = "kubecua-system"
OPERATOR = "app.kubernetes.io/name=kubecua-operator,app.kubernetes.io/instance=kubecua"
RUNNER = "localhost/kubecua/sandbox-vm-runner:dev"
IMAGES = ("localhost/kubecua/operator:dev", RUNNER)
NS, POOL, CLAIM = "vm-pool", "vms", "desktop-disk"
BOOT_TIMEOUT_S = 1500  # qemu's emulator on 2 shared cores: the VM's boot plus its snapshot
TASK = REPO / "sandbox-image" / "tasks" / "settings" / "settings-dark-style.json"
FIGURES = Figures("vm-pool-figures", digits=2)


def disk_dir() -> Path:
    """The newest VM disk hack/build-vm-disk.sh cached (`make vm-disk`)."""
    disks = sorted((cache_dir() / "vm").glob("*/disk.qcow2"), key=lambda p: p.stat().st_mtime)
    if not disks:
        pytest.skip("no VM disk under $KUBECUA_CACHE/vm: `make vm-disk` builds it")
    return disks[-1].parent


@pytest.fixture(scope="module")
def cluster(real_node_cluster: Cluster) -> Cluster:
    local = client.CoreV1Api(real_node_cluster.api_client())
    built = run(["podman", "image", "exists", RUNNER], check=False).returncode == 0
    if not built:
        pytest.skip(f"{RUNNER} is not built: `make vm-runner` (or make test-e2e) builds it")
    # Not one of the node's standard images: imported here, once per image id.
    spent = node_for(real_node_cluster).import_images([RUNNER])
    if RUNNER in spent:
        FIGURES.record("runner_image_import_s", spent[RUNNER])

    def listed(nodes: list[Any]) -> bool:  # the kubelet lists an import at its next update
        names = {t for n in nodes for i in n.status.images or [] for t in i.names or []}
        return all(i in names for i in IMAGES)

    wait_for_objects(local.list_node, listed, timeout=120,
                     field_selector=f"metadata.name={real.NAME}")  # fmt: skip
    return real_node_cluster


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[None]:
    started = time.monotonic()
    try:  # a failed install is uninstalled too: the next module installs the same release name
        cluster.helm("install", "kubecua", str(REPO / "charts" / "kubecua"), "-n", SYSTEM,
                     "--create-namespace", "--wait", "--timeout", "5m")  # fmt: skip
        FIGURES.record("helm_install_s", time.monotonic() - started)
        yield
    finally:
        cluster.helm("uninstall", "kubecua", "-n", SYSTEM, "--wait", check=False)


def base_volume(cluster: Cluster, path: Path) -> None:
    """The base disk as a read-only PersistentVolume and its claim: hostPath here (a node's
    local file); any ReadOnlyMany volume holding the same files does (docs/vm-desktops.md)."""
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{NS}-{CLAIM}"},
        "spec": {"capacity": {"storage": "8Gi"}, "storageClassName": "",
                 "accessModes": ["ReadOnlyMany"], "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(path), "type": "Directory"},
                 "claimRef": {"namespace": NS, "name": CLAIM}},
    }  # fmt: skip
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": NS},
        "spec": {"storageClassName": "", "volumeName": f"{NS}-{CLAIM}",
                 "accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "8Gi"}}},
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pv, pvc]))


@pytest.fixture(scope="module")
def vm_pool(cluster: Cluster, release: None) -> Iterator[client.V1Pod]:
    base = disk_dir()
    cluster.kubectl("create", "namespace", NS)
    base_volume(cluster, base)
    manifest = {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "replicas": 1, "backend": "pod", "warmSpares": 0,
            "desktop": {"screen": {"width": 1280, "height": 720},
                        "pod": {"image": RUNNER,
                                "resources": {"requests": {"cpu": "500m", "memory": "2Gi"},
                                              "limits": {"memory": "4Gi"}}},
                        "vm": {"volume": CLAIM, "memory": "2Gi", "cpu": 2}},
        },
    }  # fmt: skip
    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    try:
        pods = wait_for_objects(
            client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
            lambda items: any(pod_ready(p) for p in items),
            timeout=BOOT_TIMEOUT_S,
            namespace=NS,
            label_selector=f"kubecua.dev/pool={POOL}",
        )
        FIGURES.record("pool_apply_to_ready_vm_s", time.monotonic() - started)
        yield next(p for p in pods if pod_ready(p))
    finally:
        cluster.kubectl("delete", "sandboxpools", "--all", "-n", NS, "--timeout=120s",
                        check=False, timeout=150)  # fmt: skip
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", f"{NS}-{CLAIM}", "--wait=false", check=False)


def runner_report(cluster: Cluster, pod: str) -> dict[str, Any]:
    """The runner's one JSON line once its VM is ready and snapshotted."""
    logs = cluster.kubectl("logs", "-n", NS, pod, "-c", "vm").stdout
    lines = [line for line in logs.splitlines() if line.startswith("{")]
    assert lines, logs[-2000:]
    return dict(json.loads(lines[-1]))


def test_the_vm_boots_and_the_pod_turns_ready(cluster, vm_pool):
    pod = vm_pool
    assert pod.spec.node_name == real.NAME
    assert {c.name for c in pod.status.container_statuses} == {"vm", "sandbox"}
    assert all(c.state.running and c.restart_count == 0 for c in pod.status.container_statuses)
    report = runner_report(cluster, pod.metadata.name)
    assert report["desktop_url"] == "http://127.0.0.1:5000"
    FIGURES.record("vm_boot_s", report["boot_s"])
    FIGURES.record("vm_snapshot_s", report["snapshot_s"])
    ip = pod.status.pod_ip
    r = httpx.get(f"http://{ip}:8000/readyz", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["ready"] is True
    # The guest's desktop server answers on the pod's loopback only: not at the pod's IP.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{ip}:5000/platform", timeout=10)


def test_the_pools_endpointslice_lists_the_vm(cluster, vm_pool):
    ip = vm_pool.status.pod_ip

    def addresses(slices: list[Any]) -> set[str]:
        return {a for s in slices for ep in s.endpoints or []
                if ep.conditions is None or ep.conditions.ready is not False
                for a in ep.addresses or []}  # fmt: skip

    slices = wait_for_objects(
        client.DiscoveryV1Api(cluster.api_client()).list_namespaced_endpoint_slice,
        lambda items: addresses(items) == {ip},
        timeout=60,
        namespace=NS,
        label_selector=f"kubecua.dev/pool={POOL}",
    )
    assert addresses(slices) == {ip}
    cluster.kubectl("wait", f"sandboxpool/{POOL}", "-n", NS, "--timeout=60s",
                    "--for=jsonpath={.status.readyReplicas}=1")  # fmt: skip


def pool_token(cluster: Cluster) -> str:
    secrets = client.CoreV1Api(cluster.api_client()).list_namespaced_secret(NS).items
    secret = next(s for s in secrets if s.metadata.name.startswith(f"{POOL}-sandbox-token-"))
    return base64.b64decode(secret.data["token"]).decode()


def test_a_task_scores_1_then_0_after_a_restore_then_1_again(cluster, vm_pool):
    task = json.loads(TASK.read_text())
    solutions = json.loads(TASK.with_suffix(".solutions.json").read_text())
    url = f"http://{vm_pool.status.pod_ip}:8000"
    http = httpx.Client(
        base_url=url, timeout=600, headers={"Authorization": f"Bearer {pool_token(cluster)}"}
    )

    def sandbox_ready() -> bool:
        return http.get("/readyz").status_code == 200

    def episode(actions: list[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
        wait_until(sandbox_ready, 300, "the VM sandbox's /readyz")
        body = {"task": task, "observation": {"format": "jpeg", "max_pixels": 320 * 180},
                "settle": {"min_seconds": 0.2, "max_seconds": 4.0, "stable_frames": 2}}  # fmt: skip
        started = http.post("/episodes", json=body)
        assert started.status_code == 201, started.text
        eid = started.json()["episode_id"]
        for a in actions:
            step = http.post(f"/episodes/{eid}/step", json=a)
            assert step.status_code == 200, step.text
            assert "error" not in step.json().get("info", {}), step.json()["info"]
        score = http.post(f"/episodes/{eid}/evaluate")
        assert score.status_code == 200, score.text
        released = http.delete(f"/episodes/{eid}")  # the VM's snapshot restore, then verify
        assert released.status_code == 200, released.text
        return float(score.json()["score"]), released.json()

    runs = [episode(solutions["reference"]), episode([]), episode(solutions["reference"])]
    assert [score for score, _ in runs] == [1.0, 0.0, 1.0]
    assert all(rel["clean"] for _, rel in runs), runs
    restores = sorted(rel["reset_seconds"] for _, rel in runs)
    FIGURES.record("release_restore_max_s", restores[-1])
    FIGURES.record("release_restore_median_s", restores[1])
    # Each release restored the runner's snapshot, and the VM was never rebuilt.
    health = json.loads(
        cluster.kubectl("exec", "-n", NS, vm_pool.metadata.name, "-c", "sandbox", "--",
                        "python3", "-c", "import urllib.request as u; "
                        "print(u.urlopen('http://127.0.0.1:5100/healthz').read().decode())").stdout
    )  # fmt: skip
    assert health == {"state": "ready", "rebuilds": 0, "restores": 3}
    status = http.get("/status").json()
    assert status["episodes_served"] == 3
    http.close()
