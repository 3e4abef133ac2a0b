"""Pure constructors of a TrainingRun's children; owner references are added by the caller.

Names: ConfigMap `<run>-config`; ServiceAccount, Role, RoleBinding, headless Service and Indexed Job
`<run>-trainer`; metrics Service `<run>-metrics`; sglang Deployment and Service `<run>-sglang`.
"""

from __future__ import annotations

import posixpath
from typing import Any

import yaml

from kubecua_operator import names
from kubecua_operator.settings import Settings

Obj = dict[str, Any]
CONFIG_DIR = "/etc/kubecua"
CONFIG_FILE = "trainingrun.yaml"
RENDEZVOUS_PORT = 29500
SGLANG_PORT = 30000
CHECKPOINT_PATH = "/ckpt"  # spec.checkpoint.path's default (the CRD's)
SGLANG_NEEDS_VOLUME = (
    "spec.checkpoint.volume: engine sglang without spec.rollout.sglangUrls needs a "
    "PersistentVolumeClaim: the operator's sglang servers mount it read-only at "
    "spec.checkpoint.path to load each step's weights, and an emptyDir is not shared between pods"
)


def _meta(run: Obj, suffix: str, component: str) -> Obj:
    return {
        "name": names.run_child(run["metadata"]["name"], suffix),
        "namespace": run["metadata"]["namespace"],
        "labels": names.run_labels(run["metadata"]["name"], component),
    }


def token_secret_name(spec: Obj, pool: tuple[str, str] | None = None) -> str | None:
    """The Secret mounted into the trainer: spec.sandboxes.tokenSecretRef (admission checks the
    author may read it), else the pool's token. `pool` is the bound pool's (uid, backend): a pod
    or KubeVirt pool's token is the one the operator made; an external pool's is its owner's
    <pool>-sandbox-token. None while the pool is unknown: nothing is mounted by name guess."""
    sandboxes = spec["sandboxes"]
    if sandboxes.get("tokenSecretRef"):
        return str(sandboxes["tokenSecretRef"])
    if not sandboxes.get("poolRef") or pool is None:
        return None
    uid, backend = pool
    if backend == "external":
        return names.token_secret(sandboxes["poolRef"])
    return names.own_token_secret(sandboxes["poolRef"], uid)


def build_config_map(run: Obj) -> Obj:
    """The run's spec as the trainer reads it: a TrainingRun manifest in a file."""
    manifest = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": run["metadata"]["name"], "namespace": run["metadata"]["namespace"]},
        "spec": run["spec"],
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(run, "config", "config"),
        "data": {CONFIG_FILE: yaml.safe_dump(manifest, sort_keys=True)},
    }


def build_service_account(run: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(run, "trainer", "trainer"),
        "automountServiceAccountToken": True,
    }


def build_role(run: Obj) -> Obj:
    """Discover the pool's sandboxes, read its config and task ConfigMaps (training and held-out),
    patch this run's status; nothing more.
    No Secret: the token reaches the trainer as a mounted file, and a Role granting a Secret
    read would need the operator itself to hold Secret read (RBAC escalation check)."""
    name, spec = run["metadata"]["name"], run["spec"]
    configs = [names.run_child(name, "config")]
    for tasks in (spec["tasks"], (spec.get("evaluation") or {}).get("tasks") or {}):
        if tasks.get("configMapRef") and tasks["configMapRef"] not in configs:
            configs.append(tasks["configMapRef"])
    rules: list[Obj] = [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": configs,
         "verbs": ["get"]},
        {"apiGroups": [names.GROUP], "resources": ["trainingruns"], "resourceNames": [name],
         "verbs": ["get", "watch"]},
        {"apiGroups": [names.GROUP], "resources": ["trainingruns/status"], "resourceNames": [name],
         "verbs": ["get", "patch"]},
    ]  # fmt: skip
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(run, "trainer", "trainer"),
        "rules": rules,
    }


def build_role_binding(run: Obj) -> Obj:
    child = names.run_child(run["metadata"]["name"], "trainer")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(run, "trainer", "trainer"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": child},
        "subjects": [
            {"kind": "ServiceAccount", "name": child, "namespace": run["metadata"]["namespace"]}
        ],
    }


def build_network_policy(run: Obj) -> Obj:
    """The run's pods (trainers, sglang) take connections only from each other (rendezvous,
    NCCL, generation), except the metrics port, which Prometheus scrapes from anywhere."""
    name = run["metadata"]["name"]
    own = {"podSelector": {"matchLabels": {names.RUN_LABEL: name}}}
    ingress: list[Obj] = [{"from": [own]}]
    port = run["spec"].get("metrics", {}).get("port", 9400)
    if port:
        ingress.append({"ports": [{"protocol": "TCP", "port": port}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {**_meta(run, "run", "run"), "name": names.run_network_policy(name)},
        "spec": {
            "podSelector": {"matchLabels": {names.RUN_LABEL: name}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def build_rendezvous_service(run: Obj) -> Obj:
    """Headless: gives pod 0 the stable name <run>-trainer-0.<run>-trainer for torchrun."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(run, "trainer", "trainer"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {
                names.RUN_LABEL: run["metadata"]["name"],
                names.COMPONENT_LABEL: "trainer",
            },
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
        },
    }


def build_metrics_service(run: Obj) -> Obj:
    port = run["spec"].get("metrics", {}).get("port", 9400)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(run, "metrics", "metrics"),
        "spec": {
            "selector": {
                names.RUN_LABEL: run["metadata"]["name"],
                names.COMPONENT_LABEL: "trainer",
            },
            "ports": [{"name": "metrics", "port": port, "targetPort": port}],
        },
    }


def build_pod_monitor(run: Obj) -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(run, "trainer", "trainer"),
        "spec": {
            "selector": {
                "matchLabels": {
                    names.RUN_LABEL: run["metadata"]["name"],
                    names.COMPONENT_LABEL: "trainer",
                }
            },
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
        },
    }


def build_sglang(run: Obj, settings: Settings) -> list[Obj]:
    """An sglang Deployment and Service serving the run's model (engine sglang, no sglangUrls).

    The servers mount the run's checkpoint PVC read-only at spec.checkpoint.path, the path the
    trainer writes, so the model_path of each /update_weights_from_disk (<path>/step-N or
    <path>/weights/step-N) resolves in their pods too. Admission refuses such a run without
    spec.checkpoint.volume (an emptyDir is not shared between pods; sglang_volume_problem)."""
    spec = run["spec"]
    rollout, model = spec.get("rollout", {}), spec["model"]
    gpus = rollout.get("gpusPerReplica", 1)
    container = {
        "name": "sglang",
        "image": settings.sglang_image,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", model["path"], "--host", "0.0.0.0", "--port", str(SGLANG_PORT),
                 "--tp-size", str(max(gpus, 1))],
        "ports": [{"name": "http", "containerPort": SGLANG_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": SGLANG_PORT}, "periodSeconds": 5},
        "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {},
        "volumeMounts": [*_model_mounts(spec), _checkpoint_mount(spec, read_only=True)],
    }  # fmt: skip
    selector = {names.RUN_LABEL: run["metadata"]["name"], names.COMPONENT_LABEL: "sglang"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(run, "sglang", "sglang"),
        "spec": {
            "replicas": rollout.get("replicas", 1),
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": names.run_labels(run["metadata"]["name"], "sglang")},
                "spec": {
                    "automountServiceAccountToken": False,  # sglang never calls the API
                    "containers": [container],
                    "volumes": [*_model_volumes(spec), _checkpoint_volume(spec, read_only=True)],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(run, "sglang", "sglang"),
        "spec": {"selector": selector, "ports": [{"name": "http", "port": SGLANG_PORT}]},
    }
    return [deployment, service]


def _model_volumes(spec: Obj) -> list[Obj]:
    volume = spec["model"].get("volume")
    if not volume:
        return []
    return [{"name": "model", "persistentVolumeClaim": {"claimName": volume, "readOnly": True}}]


def _model_mounts(spec: Obj) -> list[Obj]:
    if not spec["model"].get("volume"):
        return []
    parent = posixpath.dirname(spec["model"]["path"].rstrip("/")) or "/"
    return [{"name": "model", "mountPath": parent, "readOnly": True}]


def checkpoint_path(spec: Obj) -> str:
    """The trainer's checkpoint root (its config reads the same field, default included)."""
    return str(spec.get("checkpoint", {}).get("path", CHECKPOINT_PATH))


def _checkpoint_volume(spec: Obj, read_only: bool = False) -> Obj:
    """spec.checkpoint.volume's PVC, else an emptyDir (one pod's own: never for sglang)."""
    claim = spec.get("checkpoint", {}).get("volume")
    if not claim:
        return {"name": "checkpoints", "emptyDir": {}}
    pvc: Obj = {"claimName": claim}
    if read_only:
        pvc["readOnly"] = True
    return {"name": "checkpoints", "persistentVolumeClaim": pvc}


def _checkpoint_mount(spec: Obj, read_only: bool = False) -> Obj:
    mount: Obj = {"name": "checkpoints", "mountPath": checkpoint_path(spec)}
    if read_only:
        mount["readOnly"] = True
    return mount


def sglang_volume_problem(spec: Obj) -> str:
    """Why the operator cannot run sglang servers for this spec, or "" (the CRD's CEL rule says
    the same at admission; this catches runs stored before it)."""
    rollout = spec.get("rollout", {})
    if rollout.get("engine") != "sglang" or rollout.get("sglangUrls"):
        return ""
    if spec.get("checkpoint", {}).get("volume"):
        return ""
    return SGLANG_NEEDS_VOLUME
