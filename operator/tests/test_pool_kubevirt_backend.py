"""KubeVirt backend against KubeVirt's CRDs (kept as test data in data/kubevirt-crds.yaml).

No virt-controller runs here, so the test plays its part: it writes VirtualMachine status as
KubeVirt would once the guest's desktop server answers its readiness probe.
"""

from __future__ import annotations

from .conftest import wait_until
from .helpers import pool_status, sandbox_pods


def kubevirt_pool(namespace: str, replicas: int) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "vms", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "backend": "kubevirt",
            "desktop": {
                "os": "Ubuntu",
                "kubevirt": {"containerDisk": "registry.example/osworld-ubuntu:1", "cpu": 2},
            },
        },
    }


def test_vm_sandboxes_become_ready_when_vm_and_episode_server_are(kube, operator, namespace):
    kube.create(kubevirt_pool(namespace, 2))
    vms = wait_until(
        lambda: len(v := kube.list("VirtualMachine", namespace, "kubecua.dev/pool=vms")) == 2 and v,
        60,
        "2 VirtualMachines",
    )
    vm = next(v for v in vms if v["metadata"]["name"] == "vms-0")
    tmpl = vm["spec"]["template"]["spec"]
    assert vm["spec"]["runStrategy"] == "Always"
    assert tmpl["volumes"][0]["containerDisk"]["image"] == "registry.example/osworld-ubuntu:1"
    assert tmpl["readinessProbe"]["httpGet"]["port"] == 5000
    assert vm["metadata"]["labels"]["kubecua.dev/sandbox"] == "vms-0"
    # The desktop Service is created in the same pass as the VMs, possibly just after them.
    desktop = wait_until(lambda: kube.get("Service", namespace, "vms-0-desktop"), 30, "Service")
    assert desktop["spec"]["selector"]["kubecua.dev/role"] == "vm"
    wait_until(lambda: len(sandbox_pods(kube, namespace, "vms")) == 2, 60, "episode-server pods")
    # Episode-server pods are Ready on kwok, but the VMs are not: no sandbox is ready yet.
    assert pool_status(kube, namespace, "vms").get("readyReplicas", 0) == 0

    for name in ("vms-0", "vms-1"):  # virt-controller's part: the guest answered /platform
        kube.patch(
            "VirtualMachine",
            namespace,
            name,
            {"status": {"ready": True, "printableStatus": "Running"}},
            sub="status",
        )
    wait_until(lambda: pool_status(kube, namespace, "vms").get("readyReplicas") == 2, 60)

    kube.patch(
        "VirtualMachine",
        namespace,
        "vms-1",
        {"status": {"ready": False, "printableStatus": "CrashLoopBackOff"}},
        sub="status",
    )
    old_uid = kube.get("VirtualMachine", namespace, "vms-1")["metadata"]["uid"]

    def replaced() -> bool:
        now = kube.get("VirtualMachine", namespace, "vms-1")
        return bool(now and now["metadata"]["uid"] != old_uid)

    wait_until(replaced, 60, "the crashed VM replaced")
    assert kube.get("Pod", namespace, "vms-1") is not None  # its episode server comes back too


def test_kubevirt_pool_policy_always_allows_its_own_traffic(kube, operator, namespace):
    """egress: [] denies everything else, never episode server -> VM (and DNS for its name)."""
    pool = kubevirt_pool(namespace, 1)
    pool["spec"]["egress"] = []
    pool["spec"]["desktop"]["kubevirt"]["desktopPort"] = 5050
    kube.create(pool)
    policy = wait_until(lambda: kube.get("NetworkPolicy", namespace, "vms-sandboxes"), 60, "policy")
    spec = policy["spec"]
    ports = [{"protocol": "TCP", "port": p} for p in (5050, 9222, 8080)]
    vms = {"matchLabels": {"kubecua.dev/pool": "vms", "kubecua.dev/role": "vm"}}
    episode = {"matchLabels": {"kubecua.dev/pool": "vms", "kubecua.dev/role": "episode-server"}}
    assert {"to": [{"podSelector": vms}], "ports": ports} in spec["egress"]
    assert {"from": [{"podSelector": episode}], "ports": ports} in spec["ingress"]
    dns = next(r for r in spec["egress"] if {"protocol": "UDP", "port": 53} in r["ports"])
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert len(spec["egress"]) == 2  # nothing else: the pool asked for no egress
