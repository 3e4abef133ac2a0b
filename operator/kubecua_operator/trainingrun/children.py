"""Pure constructors of a TrainingRun's children; owner references are added by the caller.

Names: ConfigMap `<run>-config`; ServiceAccount, Role, RoleBinding, headless Service and Indexed Job
`<run>-trainer`; metrics Service `<run>-metrics`; sglang Deployment and Service `<run>-sglang`.
"""

from __future__ import annotations

import posixpath
from typing import Any

import yaml

from kubecua_api import lora
from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator import names
from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun.model import Run

Obj = dict[str, Any]
CONFIG_DIR = "/etc/kubecua"
CONFIG_FILE = "trainingrun.yaml"
RENDEZVOUS_PORT = 29500
SGLANG_PORT = 30000
SGLANG_NEEDS_VOLUME = (
    "spec.checkpoint.volume: engine sglang without spec.rollout.sglangUrls needs a "
    "PersistentVolumeClaim: the operator's sglang servers mount it read-only at "
    "spec.checkpoint.path to load each step's weights, and an emptyDir is not shared between pods"
)


def _meta(run: Run, suffix: str, component: str) -> Obj:
    return {
        "name": names.run_child(run.name, suffix),
        "namespace": run.namespace,
        "labels": names.run_labels(run.name, component),
    }


def token_secret_name(spec: TrainingRunSpec, pool_token: str | None = None) -> str | None:
    """The Secret mounted into the trainer: spec.sandboxes.tokenSecretRef (admission checks the
    author may read it), else the bound pool's token, `pool_token`, as its backend names it (a
    pod or KubeVirt pool's is the one the operator made; an external pool's is its owner's
    <pool>-sandbox-token). None while the pool is unknown: nothing is mounted by name guess."""
    sandboxes = spec.sandboxes
    if sandboxes.token_secret_ref:
        return sandboxes.token_secret_ref
    return pool_token if sandboxes.pool_ref else None


def build_config_map(run: Run) -> Obj:
    """The run's spec as the trainer reads it: a TrainingRun manifest in a file (the spec as
    stored, defaults filled in by the API server)."""
    manifest = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": run.name, "namespace": run.namespace},
        "spec": run.body["spec"],
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(run, "config", "config"),
        "data": {CONFIG_FILE: yaml.safe_dump(manifest, sort_keys=True)},
    }


def build_service_account(run: Run) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(run, "trainer", "trainer"),
        "automountServiceAccountToken": True,
    }


def build_role(run: Run) -> Obj:
    """Discover the pool's sandboxes, read its config and task ConfigMaps (training and held-out),
    patch this run's status; nothing more.
    No Secret: the token reaches the trainer as a mounted file, and a Role granting a Secret
    read would need the operator itself to hold Secret read (RBAC escalation check)."""
    name, spec = run.name, run.spec
    configs = [names.run_child(name, "config")]
    held_out = [spec.evaluation.tasks] if spec.evaluation else []
    for tasks in (spec.tasks, *held_out):
        if tasks.config_map_ref and tasks.config_map_ref not in configs:
            configs.append(tasks.config_map_ref)
    # Discovery (trainer/kubecua_trainer/sources/kube.py): the pool's EndpointSlices, listed and
    # watched; their Services, listed and read to tell the operator's from others' (issue 42).
    rules: list[Obj] = [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]},
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


def build_role_binding(run: Run) -> Obj:
    child = names.run_child(run.name, "trainer")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(run, "trainer", "trainer"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": child},
        "subjects": [{"kind": "ServiceAccount", "name": child, "namespace": run.namespace}],
    }


def build_network_policy(run: Run) -> Obj:
    """The run's pods (trainers, sglang) take connections only from each other (rendezvous,
    NCCL, generation), except the metrics port, which Prometheus scrapes from anywhere."""
    name = run.name
    own = {"podSelector": {"matchLabels": {names.RUN_LABEL: name}}}
    ingress: list[Obj] = [{"from": [own]}]
    port = run.spec.metrics.port
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


def build_rendezvous_service(run: Run) -> Obj:
    """Headless: gives pod 0 the stable name <run>-trainer-0.<run>-trainer for torchrun."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(run, "trainer", "trainer"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.RUN_LABEL: run.name, names.COMPONENT_LABEL: "trainer"},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
        },
    }


def build_metrics_service(run: Run) -> Obj:
    port = run.spec.metrics.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(run, "metrics", "metrics"),
        "spec": {
            "selector": {names.RUN_LABEL: run.name, names.COMPONENT_LABEL: "trainer"},
            "ports": [{"name": "metrics", "port": port, "targetPort": port}],
        },
    }


def build_pod_monitor(run: Run) -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(run, "trainer", "trainer"),
        "spec": {
            "selector": {
                "matchLabels": {names.RUN_LABEL: run.name, names.COMPONENT_LABEL: "trainer"}
            },
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
        },
    }


def runs_sglang(spec: TrainingRunSpec) -> bool:
    """The operator runs sglang servers for this run (engine sglang, no sglangUrls)."""
    return spec.rollout.engine == "sglang" and not spec.rollout.sglang_urls


def build_sglang(run: Run, settings: Settings) -> list[Obj]:
    """An sglang Deployment and Service serving the run's model (engine sglang, no sglangUrls).

    The servers mount the run's checkpoint PVC read-only at spec.checkpoint.path, the path the
    trainer writes, so the model_path of each /update_weights_from_disk (<path>/step-N or
    <path>/weights/step-N) resolves in their pods too. Admission refuses such a run without
    spec.checkpoint.volume (an emptyDir is not shared between pods; sglang_volume_problem)."""
    spec = run.spec
    gpus = spec.rollout.gpus_per_replica
    container = {
        "name": "sglang",
        "image": settings.sglang_image,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", spec.model.path, "--host", "0.0.0.0", "--port", str(SGLANG_PORT),
                 "--tp-size", str(max(gpus, 1)),
                 *(lora.sglang_args(spec.model.lora) if spec.model.lora else [])],
        "ports": [{"name": "http", "containerPort": SGLANG_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": SGLANG_PORT}, "periodSeconds": 5},
        "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {},
        "volumeMounts": [*_model_mounts(spec), _checkpoint_mount(spec, read_only=True)],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }  # fmt: skip
    selector = {names.RUN_LABEL: run.name, names.COMPONENT_LABEL: "sglang"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(run, "sglang", "sglang"),
        "spec": {
            "replicas": spec.rollout.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": names.run_labels(run.name, "sglang")},
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


def _model_volumes(spec: TrainingRunSpec) -> list[Obj]:
    volume = spec.model.volume
    if not volume:
        return []
    return [{"name": "model", "persistentVolumeClaim": {"claimName": volume, "readOnly": True}}]


def _model_mounts(spec: TrainingRunSpec) -> list[Obj]:
    if not spec.model.volume:
        return []
    parent = posixpath.dirname(spec.model.path.rstrip("/")) or "/"
    return [{"name": "model", "mountPath": parent, "readOnly": True}]


def _checkpoint_volume(spec: TrainingRunSpec, read_only: bool = False) -> Obj:
    """spec.checkpoint.volume's PVC, else an emptyDir (one pod's own: never for sglang)."""
    claim = spec.checkpoint.volume
    if not claim:
        return {"name": "checkpoints", "emptyDir": {}}
    pvc: Obj = {"claimName": claim}
    if read_only:
        pvc["readOnly"] = True
    return {"name": "checkpoints", "persistentVolumeClaim": pvc}


def _checkpoint_mount(spec: TrainingRunSpec, read_only: bool = False) -> Obj:
    """At the trainer's checkpoint root (its config reads the same field)."""
    mount: Obj = {"name": "checkpoints", "mountPath": spec.checkpoint.path}
    if read_only:
        mount["readOnly"] = True
    return mount


def sglang_volume_problem(spec: TrainingRunSpec) -> str:
    """Why the operator cannot run sglang servers for this spec, or "" (the CRD's CEL rule says
    the same at admission; this catches runs stored before it)."""
    if not runs_sglang(spec) or spec.checkpoint.volume:
        return ""
    return SGLANG_NEEDS_VOLUME
