"""Pod backend: our sandbox image runs the desktop and the episode server in one pod.

The pod is Ready only when the episode server's /readyz says so (desktop answers and the screen is
not black), so readiness is application-level. restartPolicy Never: a crashed desktop becomes a
Failed pod that the pool replaces with a fresh one (with backoff) rather than a dirty restart.
"""

from __future__ import annotations

from kubecua_operator import names
from kubecua_operator.sandboxpool.backends import Obj
from kubecua_operator.sandboxpool.model import (
    FAILED,
    PENDING,
    READY,
    TERMINATING,
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


def token_volume(pool: Obj) -> tuple[Obj, Obj]:
    """The pool's operator-made token Secret (never a namesake: see names.own_token_secret)."""
    secret = names.own_token_secret(pool["metadata"]["name"], pool["metadata"].get("uid", ""))
    volume = {"name": "sandbox-token", "secret": {"secretName": secret}}
    mount = {"name": "sandbox-token", "mountPath": names.TOKEN_MOUNT, "readOnly": True}
    return volume, mount


def build_container(pool: Obj, settings: Settings) -> Obj:
    spec = pool["spec"]
    desktop = spec.get("desktop") or {}
    pod_cfg, screen = desktop.get("pod") or {}, desktop.get("screen") or {}
    verify = str((spec.get("reset") or {}).get("verify", True)).lower()
    env = [
        {"name": "KUBECUA_SANDBOX_TOKEN_FILE", "value": f"{names.TOKEN_MOUNT}/{names.TOKEN_KEY}"},
        {"name": "KUBECUA_SCREEN_WIDTH", "value": str(screen.get("width", 1920))},
        {"name": "KUBECUA_SCREEN_HEIGHT", "value": str(screen.get("height", 1080))},
        {"name": "KUBECUA_RESET_VERIFY", "value": verify},
    ]
    episodes = names.PORTS["episodes"]
    return {
        "name": "sandbox",
        "image": pod_cfg.get("image") or settings.sandbox_image,
        "ports": [{"name": n, "containerPort": p} for n, p in names.PORTS.items()],
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
        "resources": pod_cfg.get("resources") or {},
    }  # fmt: skip


def build_pod(pool: Obj, index: int, settings: Settings) -> Obj:
    meta = pool["metadata"]
    pod_cfg = (pool["spec"].get("desktop") or {}).get("pod") or {}
    name = names.sandbox_name(meta["name"], index)
    labels = {**names.sandbox_labels(meta["name"], name), names.ROLE_LABEL: "episode-server"}
    shm = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "fsGroup": 1000},
            "containers": [build_container(pool, settings)],
            "volumes": [token_volume(pool)[0], shm],
            "nodeSelector": pod_cfg.get("nodeSelector") or {},
            "tolerations": pod_cfg.get("tolerations") or [],
            "terminationGracePeriodSeconds": 10,
        },
    }


def observe_pods(pool: Obj, children: list[Summary], role: str) -> list[Sandbox]:
    out = []
    for pod in children:
        index = names.sandbox_index(pool["metadata"]["name"], pod.name)
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


class PodBackend:
    uses_pods = True

    def build(self, pool: Obj, index: int, settings: Settings) -> list[Obj]:
        return [build_pod(pool, index, settings)]

    def parts(self, sandbox: str) -> list[tuple[str, str]]:
        return [("Pod", sandbox)]

    def observe(
        self, pool: Obj, children: list[Summary], probes: dict[str, Probe]
    ) -> list[Sandbox]:
        return observe_pods(pool, children, "episode-server")
