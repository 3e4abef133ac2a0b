"""KubeVirt backend: a kubevirt.io/v1 VirtualMachine per sandbox, booted from a containerDisk or a
clone of a DataVolume, plus an episode-server pod pointed at the VM's desktop API.

Boots OSWorld's stock Ubuntu image, or kubecua's own VM disk as a containerDisk (`make
vm-containerdisk`, with kernelBoot: its /boot kernel and initramfs). Either desktop server
listens on :5000, and the VM's readiness probe asks it for /platform. The pool's token reaches
the guest on a NoCloud config drive from the pool's token Secret. No VM has booted under
KubeVirt here (the tests check the manifests against KubeVirt's CRD schema). Windows is refused
at admission (the CRD's rule on spec.desktop.os): the episode server drives Linux desktops only.
The episode server reaches the VM through the `<sandbox>-desktop` Service (the VM's launcher pod
carries role=vm), so the sandbox's main Service keeps one backend: the episode-server pod.
"""

from __future__ import annotations

from kubecua_api.sandboxpool import KubevirtDesktop
from kubecua_operator import names
from kubecua_operator.k8s import Kube
from kubecua_operator.sandboxpool.backends.base import Backend, Obj, Repair, dump
from kubecua_operator.sandboxpool.backends.pod import (
    observe_pods,
    security_context,
    token_volume,
)
from kubecua_operator.sandboxpool.children import build_network_policy
from kubecua_operator.sandboxpool.model import (
    FAILED,
    PENDING,
    TERMINATING,
    Pool,
    Probe,
    Sandbox,
    Summary,
    service_shape,
    summarize_object,
)
from kubecua_operator.settings import Settings

# Our VM disk as a containerDisk (hack/build-vm-disk.sh --containerdisk): the qcow2 under /disk,
# the kernel and initramfs under /boot; the kernel arguments of kubecua_episode.vm.runner.
CONTAINER_DISK_PATH = "/disk/disk.qcow2"
KERNEL_ARGS = "root=/dev/vda rw console=ttyS0 init=/opt/kubecua/vm/init quiet"
FAILED_VM_STATES = {"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "DataVolumeError"}
UNSCHEDULABLE_VM_STATES = {"ErrorUnschedulable"}


def settings_of(pool: Pool) -> KubevirtDesktop:
    kv = pool.spec.desktop.kubevirt
    assert kv is not None  # the CRD requires spec.desktop.kubevirt of a kubevirt pool
    return kv


def build_vm(pool: Pool, index: int) -> Obj:
    kv = settings_of(pool)
    name = names.sandbox_name(pool.name, index)
    labels = {**names.sandbox_labels(pool.name, name), names.ROLE_LABEL: "vm"}
    # KubeVirt copies the template's labels onto its launcher pod, which KubeVirt makes and
    # shapes: without the managed-by label the chart's guard on the operator's pods skips it.
    launcher = {k: v for k, v in labels.items() if k not in names.MANAGED_BY}
    vm_spec: Obj = {
        "runStrategy": "Always",
        "template": {
            "metadata": {"labels": launcher},
            "spec": {
                "domain": {
                    "cpu": {"cores": kv.cpu},
                    "memory": {"guest": kv.memory},
                    "resources": {"requests": {"memory": kv.memory}},
                    "devices": {
                        # boot first: /dev/vda, the root our disk's kernel arguments name.
                        "disks": [
                            {"name": "boot", "disk": {"bus": "virtio"}},
                            {"name": "cidata", "disk": {"bus": "virtio"}},
                        ],
                        "interfaces": [{"name": "default", "masquerade": {}}],
                    },
                },
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [_boot_volume(kv, name), _config_drive(pool)],
                "readinessProbe": {
                    "httpGet": {"path": "/platform", "port": kv.desktop_port},
                    "initialDelaySeconds": 20,
                    "periodSeconds": 5,
                    "failureThreshold": 3,
                },
            },
        },
    }
    if kv.kernel_boot:
        vm_spec["template"]["spec"]["domain"]["firmware"] = {"kernelBoot": _kernel_boot(kv)}
    if kv.data_volume:
        vm_spec["dataVolumeTemplates"] = [
            {
                "metadata": {"name": f"{name}-disk"},
                "spec": {
                    "source": {"pvc": {"name": kv.data_volume, "namespace": pool.namespace}},
                    "storage": {},
                },
            }
        ]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": pool.namespace, "labels": labels},
        "spec": vm_spec,
    }


def _boot_volume(kv: KubevirtDesktop, name: str) -> Obj:
    if kv.container_disk:
        disk: Obj = {"image": kv.container_disk}
        if kv.kernel_boot:  # ours (make vm-containerdisk): the disk beside /boot
            disk["path"] = CONTAINER_DISK_PATH
        return {"name": "boot", "containerDisk": disk}
    return {"name": "boot", "dataVolume": {"name": f"{name}-disk"}}


def _kernel_boot(kv: KubevirtDesktop) -> Obj:
    """Direct kernel boot from the containerDisk image's own /boot files (our disk has no
    bootloader), with the same kernel arguments as kubecua_episode.vm's runner."""
    return {
        "container": {
            "image": kv.container_disk,
            "kernelPath": "/boot/vmlinuz",
            "initrdPath": "/boot/initrd.img",
        },
        "kernelArgs": KERNEL_ARGS,
    }


def _config_drive(pool: Pool) -> Obj:
    """The pool's token Secret as the guest's NoCloud config drive (an iso9660 disk labelled
    cidata whose user-data is the Secret's `userdata`): the VM disk's init reads the token
    there. OSWorld's stock image has no reader for it, and its desktop server no token."""
    secret = names.own_token_secret(pool.name, pool.uid)
    return {"name": "cidata", "cloudInitNoCloud": {"userDataSecretRef": {"name": secret}}}


def build_desktop_service(pool: Pool, index: int) -> Obj:
    name = names.sandbox_name(pool.name, index)
    port = settings_of(pool).desktop_port
    ports = [
        {"name": "desktop", "port": 5000, "targetPort": port},
        {"name": "cdp", "port": 9222, "targetPort": 9222},
        {"name": "vlc", "port": 8080, "targetPort": 8080},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}-desktop",
            "namespace": pool.namespace,
            "labels": {**names.pool_labels(pool.name), names.ROLE_LABEL: "vm"},
        },
        "spec": {"selector": {names.SANDBOX_LABEL: name, names.ROLE_LABEL: "vm"}, "ports": ports},
    }


def build_episode_pod(pool: Pool, index: int, settings: Settings) -> Obj:
    name = names.sandbox_name(pool.name, index)
    desktop = f"http://{name}-desktop.{pool.namespace}.svc"
    volume, mount = token_volume(pool)
    env = [
        {"name": "KUBECUA_SANDBOX_TOKEN_FILE", "value": f"{names.TOKEN_MOUNT}/{names.TOKEN_KEY}"},
        {"name": "KUBECUA_DESKTOP_URL", "value": f"{desktop}:5000"},
        {"name": "KUBECUA_CDP_URL", "value": f"{desktop}:9222"},
        {"name": "KUBECUA_VLC_URL", "value": f"{desktop}:8080"},
        {"name": "KUBECUA_DESKTOP_OS", "value": pool.spec.desktop.os},
    ]
    container = {
        "name": "episode-server",
        "image": settings_of(pool).episode_server_image or settings.sandbox_image,
        "args": ["episode-server"],
        "ports": [{"name": "episodes", "containerPort": 8000}],
        "env": env,
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": 8000},
            "periodSeconds": 2,
            "timeoutSeconds": 5,
        },
        "securityContext": security_context(),
        "volumeMounts": [mount],
    }
    labels = {**names.sandbox_labels(pool.name, name), names.ROLE_LABEL: "episode-server"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": pool.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Always",  # the VM holds the state; the episode server is stateless
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True},
            "containers": [container],
            "volumes": [volume],
        },
    }


def combine(pod_box: Sandbox | None, vm: Summary) -> Sandbox:
    """A VM sandbox is ready when the VM is ready and its episode server (a pod) is ready."""
    index = pod_box.index if pod_box else -1
    if vm.deleting or (pod_box and pod_box.state == TERMINATING):
        return Sandbox(vm.name, index, TERMINATING, vm.uid)
    if vm.phase in FAILED_VM_STATES or (pod_box and pod_box.state == FAILED):
        return Sandbox(vm.name, index, FAILED, vm.uid, reason=vm.phase)
    state = pod_box.state if pod_box and vm.ready else PENDING
    limited = vm.phase in UNSCHEDULABLE_VM_STATES or bool(pod_box and pod_box.unschedulable)
    url = pod_box.url if pod_box else ""
    return Sandbox(vm.name, index, state, vm.uid, url, unschedulable=limited, reason=vm.phase)


class KubevirtBackend(Backend):
    def build(self, pool: Pool, index: int, settings: Settings) -> list[Obj]:
        return [
            build_vm(pool, index),
            build_desktop_service(pool, index),
            build_episode_pod(pool, index, settings),
        ]

    def parts(self, sandbox: str) -> list[tuple[str, str]]:
        return [("VirtualMachine", sandbox), ("Pod", sandbox), ("Service", f"{sandbox}-desktop")]

    def observe(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe]
    ) -> list[Sandbox]:
        pods = {s.name: s for s in observe_pods(pool, children, "episode-server")}
        out = []
        for vm in children:
            index = names.sandbox_index(pool.name, vm.name)
            if vm.kind != "VirtualMachine" or index is None:
                continue
            box = combine(pods.get(vm.name), vm)
            out.append(
                Sandbox(box.name, index, box.state, box.uid, box.url, box.unschedulable, box.reason)
            )
        return out

    def shared_objects(self, pool: Pool, operator_namespace: str) -> list[Obj]:
        """The NetworkPolicy, which also lets each episode server reach its VM."""
        vm_ports = [settings_of(pool).desktop_port, names.PORTS["cdp"], names.PORTS["vlc"]]
        egress = [dump(rule) for rule in pool.spec.egress or []]
        return [
            build_network_policy(pool.name, pool.namespace, egress, operator_namespace, vm_ports)
        ]

    def not_installed(self, api: Kube) -> tuple[str, str] | None:
        if api.has_resource("kubevirt.io/v1", "virtualmachines"):
            return None
        message = "KubeVirt is not installed: the API serves no kubevirt.io/v1 virtualmachines"
        return "KubeVirtNotInstalled", message

    def extra_children(self, api: Kube, pool: Pool) -> list[Summary]:
        """VMs and their desktop Services: listed, not watched, since KubeVirt may be absent."""
        selector = f"{names.POOL_LABEL}={pool.name}"
        vms = api.list("VirtualMachine", pool.namespace, selector)
        desktops = api.list("Service", pool.namespace, f"{selector},{names.ROLE_LABEL}=vm")
        found = [summarize_object("VirtualMachine", vm) for vm in vms]
        found += [summarize_object("Service", d) for d in desktops]
        return [x for x in found if x.owner == pool.uid]

    def repairs(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe], settings: Settings
    ) -> list[Repair]:
        """Live VMs' episode-server pods and desktop Services that are gone (deleted, or a create
        that raced) are created again; a desktop Service whose selector, ports or labels someone
        edited is restored. `children` must include the desktop Services (extra_children)."""
        pods = {c.name for c in children if c.kind == "Pod" and c.role == "episode-server"}
        services = {c.name: c for c in children if c.kind == "Service"}
        out: list[Repair] = []
        for vm in children:
            index = names.sandbox_index(pool.name, vm.name)
            if vm.kind != "VirtualMachine" or index is None or vm.deleting:
                continue
            if vm.name not in pods:
                out.append(("create", build_episode_pod(pool, index, settings)))
            want = build_desktop_service(pool, index)
            found = services.get(want["metadata"]["name"])
            if found is None:
                out.append(("create", want))
            elif not found.deleting and found.shape != service_shape(want):
                out.append(("restore", want))
        return out
