"""Pod backend: our sandbox image runs the desktop and the episode server in one pod.

With spec.desktop.vm the pod boots a VM disk instead (docs/vm-desktops.md): a qemu runner on a
copy-on-write overlay of a read-only base from a PersistentVolumeClaim, and the episode server in
its `--remote` mode, which restores the VM's snapshot on release rather than cleaning in place.

The pod is Ready only when the episode server's /readyz says so (desktop answers and the screen is
not black), so readiness is application-level. restartPolicy Never: a crashed desktop becomes a
Failed pod that the pool replaces with a fresh one (with backoff) rather than a dirty restart.
"""

from __future__ import annotations

from kubecua_api.liveview import LIVE_VIEW_PORT
from kubecua_api.sandboxpool import PodDesktop
from kubecua_operator import names
from kubecua_operator.sandboxpool.backends.base import Backend, Obj, dump
from kubecua_operator.sandboxpool.children import build_network_policy
from kubecua_operator.sandboxpool.model import (
    FAILED,
    PENDING,
    READY,
    TERMINATING,
    Pool,
    Probe,
    Sandbox,
    Summary,
)
from kubecua_operator.settings import Settings

# Container states that never heal by waiting: the sandbox is failed (and replaced with backoff).
STUCK_REASONS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
}


def sandbox_state(pod: Summary) -> str:
    if pod.deleting:
        return TERMINATING
    if pod.phase in ("Failed", "Succeeded", "Unknown") or pod.waiting in STUCK_REASONS:
        return FAILED
    return READY if pod.ready and pod.phase == "Running" else PENDING


def security_context() -> Obj:
    return {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def token_volume(pool: Pool) -> tuple[Obj, Obj]:
    """The pool's operator-made token Secret (never a namesake: see names.own_token_secret)."""
    secret = names.own_token_secret(pool.name, pool.uid)
    volume = {"name": "sandbox-token", "secret": {"secretName": secret}}
    mount = {"name": "sandbox-token", "mountPath": names.TOKEN_MOUNT, "readOnly": True}
    return volume, mount


def build_container(pool: Pool, settings: Settings) -> Obj:
    pod_cfg, screen = pool.spec.desktop.pod or PodDesktop(), pool.spec.desktop.screen
    env = [
        {"name": "KUBECUA_SANDBOX_TOKEN_FILE", "value": f"{names.TOKEN_MOUNT}/{names.TOKEN_KEY}"},
        {"name": "KUBECUA_SCREEN_WIDTH", "value": str(screen.width)},
        {"name": "KUBECUA_SCREEN_HEIGHT", "value": str(screen.height)},
        {"name": "KUBECUA_RESET_VERIFY", "value": str(pool.spec.reset.verify).lower()},
    ]
    episodes = names.PORTS["episodes"]
    ports = [{"name": n, "containerPort": p} for n, p in names.PORTS.items()]
    if pool.spec.live_view.enabled:  # kubectl port-forward only: no Service, no policy opens it
        env.append({"name": "KUBECUA_LIVE_VIEW", "value": pool.spec.live_view.mode})
        ports.append({"name": "live-view", "containerPort": LIVE_VIEW_PORT})
    return {
        "name": "sandbox",
        "image": pod_cfg.image or settings.sandbox_image,
        "ports": ports,
        "env": env,
        # Timeouts above the 1 s default: a desktop busy with an episode answers late, and a
        # missed probe must not flap the pod out of its Service. The startup probe gives the
        # desktop's first start (Xvfb, apps' caches) two minutes before liveness counts.
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": episodes},
            "periodSeconds": 2,
            "timeoutSeconds": 5,
            "failureThreshold": 2,
        },
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": episodes},
            "periodSeconds": 2,
            "timeoutSeconds": 5,
            "failureThreshold": 60,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": episodes},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "securityContext": security_context(),
        "volumeMounts": [token_volume(pool)[1],
                         {"name": "shm", "mountPath": "/dev/shm"}],
        "resources": dump(pod_cfg.resources),
    }  # fmt: skip


# A VM sandbox (spec.desktop.vm): where the base disk's claim and the VM's overlay are mounted,
# and the loopback ports the runner forwards to the guest (the episode server reaches them there).
VM_BASE, VM_WORK, VM_CONTROL_PORT = "/var/lib/kubecua/vm-base", "/var/lib/kubecua/vm", 5100
KVM_RESOURCE = "devices.kubevirt.io/kvm"  # KubeVirt's device plugin advertises /dev/kvm so
PYTHON = "/opt/kubecua/episode-server/.venv/bin/python"


def memory_mb(quantity: str) -> int:
    """`2Gi` or `2048Mi` (the CRD's pattern) in MiB."""
    return int(quantity[:-2]) * (1024 if quantity.endswith("Gi") else 1)


def build_vm_containers(pool: Pool, name: str, settings: Settings) -> list[Obj]:
    """The runner, which boots the base disk on an overlay in the pod's emptyDir and restores
    its snapshot on request, and the episode server pointed at it (restores instead of cleans).
    Only the episode server's port leaves the pod: the runner binds the guest's ports to
    127.0.0.1, so the desktop is reached through the episode server alone."""
    desktop = pool.spec.desktop
    vm, pod_cfg, screen = desktop.vm, desktop.pod or PodDesktop(), desktop.screen
    assert vm is not None  # build_pod's caller: a pool with spec.desktop.vm
    token = f"{names.TOKEN_MOUNT}/{names.TOKEN_KEY}"
    disk = ["--disk", f"{VM_BASE}/{vm.disk}"] if vm.disk else ["--disk-dir", VM_BASE]
    resources = dump(pod_cfg.resources)
    if vm.kvm:
        resources.setdefault("limits", {})[KVM_RESOURCE] = "1"
        resources.setdefault("requests", {})[KVM_RESOURCE] = "1"
    runner = {
        "name": "vm",
        "image": pod_cfg.image,
        "command": [PYTHON, "-m", "kubecua_episode.vm", *disk,
                    "--workdir", f"{VM_WORK}/{name}", "--port", str(names.PORTS["desktop"]),
                    "--control-port", str(VM_CONTROL_PORT), "--token-file", token,
                    "--memory-mb", str(memory_mb(vm.memory)),
                    "--cpus", str(vm.cpu), "--screen", f"{screen.width}x{screen.height}",
                    "--cdp-port", str(names.PORTS["cdp"]), "--vlc-port", str(names.PORTS["vlc"])],
        # kvm when the pod has /dev/kvm (the device resource) and the host runs stock kernels,
        # else qemu's emulator (kubecua_episode.vm.runner.default_accel).
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "securityContext": security_context(),
        "volumeMounts": [token_volume(pool)[1],
                         {"name": "vm-base", "mountPath": VM_BASE, "readOnly": True},
                         {"name": "vm", "mountPath": VM_WORK}],
        "resources": resources,
    }  # fmt: skip
    server = build_container(pool, settings)
    local = "http://127.0.0.1"
    server["image"], server["args"] = pod_cfg.image, ["episode-server"]
    server["env"] += [
        {"name": "KUBECUA_DESKTOP_URL", "value": f"{local}:{names.PORTS['desktop']}"},
        {"name": "KUBECUA_CDP_URL", "value": f"{local}:{names.PORTS['cdp']}"},
        {"name": "KUBECUA_VLC_URL", "value": f"{local}:{names.PORTS['vlc']}"},
        {"name": "KUBECUA_VM_CONTROL_URL", "value": f"{local}:{VM_CONTROL_PORT}"},
    ]
    server["ports"] = [{"name": "episodes", "containerPort": names.PORTS["episodes"]}]
    server["volumeMounts"] = [token_volume(pool)[1]]
    server["resources"] = {}
    # The VM boots (minutes under qemu's emulator) while the episode server already answers
    # /healthz; readiness waits for the VM, liveness only for the server.
    return [runner, server]


def build_pod(pool: Pool, index: int, settings: Settings) -> Obj:
    pod_cfg, vm = pool.spec.desktop.pod or PodDesktop(), pool.spec.desktop.vm
    name = names.sandbox_name(pool.name, index)
    labels = {**names.sandbox_labels(pool.name, name), names.ROLE_LABEL: "episode-server"}
    shm = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    if vm:
        containers = build_vm_containers(pool, name, settings)
        volumes = [
            token_volume(pool)[0],
            {"name": "vm-base",
             "persistentVolumeClaim": {"claimName": vm.volume, "readOnly": True}},
            # The overlay and its snapshot (the guest's memory and written blocks): local disk.
            {"name": "vm", "emptyDir": {}},
        ]  # fmt: skip
    else:
        containers, volumes = [build_container(pool, settings)], [token_volume(pool)[0], shm]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": pool.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "fsGroup": 1000},
            "containers": containers,
            "volumes": volumes,
            "nodeSelector": pod_cfg.node_selector or {},
            "tolerations": pod_cfg.tolerations or [],
            "terminationGracePeriodSeconds": 10,
        },
    }


def observe_pods(pool: Pool, children: list[Summary], role: str) -> list[Sandbox]:
    out = []
    for pod in children:
        index = names.sandbox_index(pool.name, pod.name)
        if pod.kind != "Pod" or pod.role != role or index is None:
            continue
        state = sandbox_state(pod)
        out.append(
            Sandbox(
                name=pod.name,
                index=index,
                state=state,
                uid=pod.uid,
                url=f"http://{pod.ip}:{names.PORTS['episodes']}" if pod.ip else "",
                unschedulable=pod.unschedulable and state == PENDING,
                reason=pod.waiting or pod.phase,
            )
        )
    return out


class PodBackend(Backend):
    def build(self, pool: Pool, index: int, settings: Settings) -> list[Obj]:
        return [build_pod(pool, index, settings)]

    def parts(self, sandbox: str) -> list[tuple[str, str]]:
        return [("Pod", sandbox)]

    def observe(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe]
    ) -> list[Sandbox]:
        return observe_pods(pool, children, "episode-server")

    def shared_objects(self, pool: Pool, operator_namespace: str) -> list[Obj]:
        egress = [dump(rule) for rule in pool.spec.egress or []]
        return [build_network_policy(pool.name, pool.namespace, egress, operator_namespace, [])]
