"""The pod backend's VM mode (spec.desktop.vm) on the real control plane: the operator's pods boot
a VM disk with qemu beside an episode server that restores the VM's snapshot, and the API server
refuses what cannot work, naming the field (the chart's admission guard admits these pods:
test_admission_guard.py). The VM itself boots in tests/e2e/test_real_node_vm_pool.py (a real node)
and sandbox-image/episode-server/tests/test_vm.py."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from .conftest import wait_until
from .helpers import pool_manifest, sandbox_pods

RUNNER = "localhost/kubecua/sandbox-vm-runner:dev"
Obj = dict[str, Any]


def vm_pool(name: str, namespace: str, replicas: int, **vm: Any) -> Obj:
    desktop = {"screen": {"width": 1280, "height": 720},
               "pod": {"image": RUNNER, "resources": {"limits": {"memory": "4Gi"}}},
               "vm": {"volume": "ubuntu-base", **vm}}  # fmt: skip
    return pool_manifest(name, namespace, replicas, desktop=desktop)


def containers(pod: Obj) -> dict[str, Obj]:
    return {c["name"]: c for c in pod["spec"]["containers"]}


def env(container: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_vm_pool_pods_run_the_runner_and_a_restoring_episode_server(kube, operator, namespace):
    kube.create(vm_pool("vms", namespace, 2))
    wait_until(lambda: len(sandbox_pods(kube, namespace, "vms")) == 2, 60, "two VM sandbox pods")
    pods = sandbox_pods(kube, namespace, "vms")
    pod = next(p for p in pods if p["metadata"]["name"] == "vms-1")
    spec = pod["spec"]
    vm, server = containers(pod)["vm"], containers(pod)["sandbox"]
    assert vm["image"] == server["image"] == RUNNER
    # The runner: our disk's directory from the claim, an overlay in the pod's emptyDir, the
    # pool's token for the guest's config drive, the guest's ports on fixed loopback ports.
    assert vm["command"] == [
        "/opt/kubecua/episode-server/.venv/bin/python", "-m", "kubecua_episode.vm",
        "--disk-dir", "/var/lib/kubecua/vm-base", "--workdir", "/var/lib/kubecua/vm/vms-1",
        "--port", "5000", "--control-port", "5100",
        "--token-file", "/var/run/kubecua/sandbox-token/token", "--memory-mb", "2048",
        "--cpus", "2", "--screen", "1280x720", "--cdp-port", "9222", "--vlc-port", "8080",
    ]  # fmt: skip
    mounts = {m["name"]: m for m in vm["volumeMounts"]}
    assert mounts["vm-base"] == {"name": "vm-base", "mountPath": "/var/lib/kubecua/vm-base",
                                 "readOnly": True}  # fmt: skip
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["vm-base"]["persistentVolumeClaim"] == {"claimName": "ubuntu-base",
                                                            "readOnly": True}  # fmt: skip
    assert "emptyDir" in volumes["vm"]
    assert not any("hostPath" in v for v in spec["volumes"])
    # TCG: nothing privileged, no device; the pool's resources go to the VM's container.
    assert vm["resources"]["limits"] == {"memory": "4Gi"}
    for c in (vm, server):
        assert (
            c["securityContext"]["privileged"] is False
            if "privileged" in c["securityContext"]
            else True
        )
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # The episode server: --remote mode at the runner's loopback ports, restores through it.
    assert server["args"] == ["episode-server"]
    e = env(server)
    assert e["KUBECUA_DESKTOP_URL"] == "http://127.0.0.1:5000"
    assert e["KUBECUA_VM_CONTROL_URL"] == "http://127.0.0.1:5100"
    assert (e["KUBECUA_CDP_URL"], e["KUBECUA_VLC_URL"]) == ("http://127.0.0.1:9222",
                                                            "http://127.0.0.1:8080")  # fmt: skip
    # Only the episode server's port leaves the pod; readiness is its /readyz (the VM's state).
    assert server["ports"] == [{"name": "episodes", "containerPort": 8000, "protocol": "TCP"}]
    assert "ports" not in vm
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_kvm_and_a_self_booting_disk(kube, operator, namespace):
    kube.create(vm_pool("osw", namespace, 1, disk="Ubuntu.qcow2", kvm=True, memory="4Gi", cpu=4))
    (pod,) = wait_until(lambda: sandbox_pods(kube, namespace, "osw"), 60, "the VM sandbox pod")
    vm = containers(pod)["vm"]
    argv = vm["command"]
    assert argv[argv.index("--disk") + 1] == "/var/lib/kubecua/vm-base/Ubuntu.qcow2"
    assert "--disk-dir" not in argv
    assert argv[argv.index("--memory-mb") + 1] == "4096"
    assert argv[argv.index("--cpus") + 1] == "4"
    # /dev/kvm from KubeVirt's device plugin, as a resource: no privileged pod, no hostPath.
    assert vm["resources"]["limits"] == {"memory": "4Gi", "devices.kubevirt.io/kvm": "1"}
    assert vm["resources"]["requests"]["devices.kubevirt.io/kvm"] == "1"


def refused(kube, obj: Obj) -> str:
    with pytest.raises(ApiException) as err:
        kube.create(obj)
    assert err.value.status == 422, err.value.body
    return str(err.value.body)


def test_api_server_refuses_vm_pools_that_cannot_work(kube, crds, namespace):
    no_image = vm_pool("a", namespace, 1)
    del no_image["spec"]["desktop"]["pod"]
    assert "spec.desktop.vm needs spec.desktop.pod.image" in refused(kube, no_image)
    on_kubevirt = vm_pool("b", namespace, 1)
    on_kubevirt["spec"]["backend"] = "kubevirt"
    on_kubevirt["spec"]["desktop"]["kubevirt"] = {"containerDisk": "x"}
    del on_kubevirt["spec"]["desktop"]["pod"]
    assert "spec.desktop.vm is only allowed when backend is pod" in refused(kube, on_kubevirt)
    assert "spec.desktop.vm.disk" in refused(kube, vm_pool("c", namespace, 1, disk="../etc/x"))
    assert "spec.desktop.vm.memory" in refused(kube, vm_pool("d", namespace, 1, memory="2G"))
    no_volume = vm_pool("e", namespace, 1)
    del no_volume["spec"]["desktop"]["vm"]["volume"]
    assert "spec.desktop.vm.volume: Required value" in refused(kube, no_volume)
