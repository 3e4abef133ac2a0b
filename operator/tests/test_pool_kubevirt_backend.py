"""KubeVirt backend against KubeVirt's CRDs (kept as test data in data/kubevirt-crds.yaml).

No virt-controller runs here, so the test plays its part: it writes VirtualMachine status as
KubeVirt would once the guest's desktop server answers its readiness probe.
"""

from __future__ import annotations

import base64

import pytest
from kubernetes.client.rest import ApiException

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


def test_our_vm_disk_boots_its_kernel_and_reads_the_token_from_a_nocloud_drive(
    kube, operator, namespace
):
    """kubecua's disk as a containerDisk (make vm-containerdisk): kernelBoot from the image's
    /boot, and the pool's token Secret as a cloudInitNoCloud drive. Read back from the API
    server: KubeVirt's schema prunes any field it does not know, so what comes back is valid."""
    pool = kubevirt_pool(namespace, 1)
    pool["spec"]["desktop"]["kubevirt"] = {
        "containerDisk": "localhost/kubecua/sandbox-vm-disk:dev", "kernelBoot": True,
        "memory": "2Gi", "cpu": 2,
    }  # fmt: skip
    kube.create(pool)
    (vm,) = wait_until(
        lambda: kube.list("VirtualMachine", namespace, "kubecua.dev/pool=vms"), 60, "the VM"
    )
    tmpl = vm["spec"]["template"]["spec"]
    assert tmpl["domain"]["firmware"]["kernelBoot"] == {
        "container": {"image": "localhost/kubecua/sandbox-vm-disk:dev",
                      "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initrd.img"},
        "kernelArgs": "root=/dev/vda rw console=ttyS0 init=/opt/kubecua/vm/init quiet",
    }  # fmt: skip
    volumes = {v["name"]: v for v in tmpl["volumes"]}
    assert volumes["boot"]["containerDisk"] == {
        "image": "localhost/kubecua/sandbox-vm-disk:dev", "path": "/disk/disk.qcow2"
    }  # fmt: skip
    # The boot disk first (/dev/vda, the kernel's root=), the config drive second.
    assert [d["name"] for d in tmpl["domain"]["devices"]["disks"]] == ["boot", "cidata"]
    secret_name = volumes["cidata"]["cloudInitNoCloud"]["userDataSecretRef"]["name"]
    uid = kube.get("SandboxPool", namespace, "vms")["metadata"]["uid"].replace("-", "")
    assert secret_name == f"vms-sandbox-token-{uid[:10]}"
    secret = wait_until(lambda: kube.get("Secret", namespace, secret_name), 30, "the token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    # What sandbox-image/vm/init.sh reads from the drive's user-data: KEY=VALUE lines.
    userdata = base64.b64decode(secret["data"]["userdata"]).decode()
    assert userdata == f"KUBECUA_SANDBOX_TOKEN={token}\n"
    assert len(token) >= 16


def test_kernel_boot_without_a_container_disk_is_refused(kube, crds, namespace):
    pool = kubevirt_pool(namespace, 1)
    pool["spec"]["desktop"]["kubevirt"] = {"dataVolume": "ubuntu", "kernelBoot": True}
    with pytest.raises(ApiException) as err:
        kube.create(pool)
    assert err.value.status == 422
    assert "spec.desktop.kubevirt.kernelBoot needs containerDisk" in str(err.value.body)
