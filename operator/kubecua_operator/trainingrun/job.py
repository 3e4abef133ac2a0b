"""The trainer workload: an Indexed Job of N pods with G GPUs each, torchrun inside.

torchrun reads its settings from PET_* variables: pod i gets PET_NODE_RANK=i from its completion
index, and every pod meets at <run>-trainer-0.<run>-trainer (the headless Service). The pods carry
the pool's client label so the pool's NetworkPolicy admits them. `suspend` is the Job's own: the
Job controller removes the pods (SIGTERM: the trainer checkpoints) and recreates them on resume,
and the trainer resumes from its latest checkpoint.

Exit codes are the contract with the trainer: 0 only when every step is done (the index is
complete), 143 when a SIGTERM stopped it after checkpointing its last completed step (a suspend,
an eviction, a drain, `kubectl delete pod`). The Job's podFailurePolicy ignores such stops and
disruptions (a replacement pod resumes, backoffLimit untouched) and counts every other failure
(a rank that crashed fails its pod, and the Job's backoffLimit bounds the retries).
"""

from __future__ import annotations

from typing import Any

from kubecua_api.constants import POOL_UID_ENV
from kubecua_api.taskverify import MANIFEST_KEY
from kubecua_api.trainingrun import TrainerConfig, TrainerResources
from kubecua_operator import names
from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun.children import (
    CONFIG_DIR,
    CONFIG_FILE,
    RENDEZVOUS_PORT,
    SGLANG_PORT,
    _checkpoint_mount,
    _checkpoint_volume,
    _model_mounts,
    _model_volumes,
    runs_sglang,
    token_secret_name,
)
from kubecua_operator.trainingrun.model import Run

Obj = dict[str, Any]
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
TRAINER_CONTAINER = "trainer"
STOPPED_EXIT_CODE = 143  # kubecua_trainer: 128 + SIGTERM, after checkpointing (cli.STOPPED)


def pod_failure_policy() -> Obj:
    """Stops are not failures: a trainer that exited 143 (it checkpointed on SIGTERM) or a pod the
    cluster disrupted (eviction, preemption, drain: DisruptionTarget, whatever its exit code,
    e.g. 137 when the grace period ran out) is replaced without counting against backoffLimit.
    Any other failure counts, as without a policy. (A policy also makes the Job replace a pod
    only once it has terminated, so two pods of one index never write checkpoints at once.)"""
    return {
        "rules": [
            {
                "action": "Ignore",
                "onExitCodes": {
                    "containerName": TRAINER_CONTAINER,
                    "operator": "In",
                    "values": [STOPPED_EXIT_CODE],
                },
            },
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]
    }


def processes_per_node(trainer: TrainerConfig) -> int:
    return max(1, trainer.gpus_per_node)  # one per GPU; one on the CPU


def trainer_env(run: Run, pool_token: str | None = None, pool_uid: str = "") -> list[Obj]:
    spec = run.spec
    child = names.run_child(run.name, "trainer")
    master = f"{child}-0.{child}"
    index_ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    env: list[Obj] = [
        {"name": "PET_NNODES", "value": str(spec.trainer.nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(processes_per_node(spec.trainer))},
        {"name": "PET_NODE_RANK", "valueFrom": index_ref},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
        {"name": "KUBECUA_TRAININGRUN_NAME", "value": run.name},
        {"name": "KUBECUA_TRAININGRUN_NAMESPACE", "value": run.namespace},
        {"name": "KUBECUA_RESUME", "value": "latest"},
    ]
    if token_secret_name(spec, pool_token):
        env.append({"name": "KUBECUA_SANDBOX_TOKEN_FILE", "value": f"{names.TOKEN_MOUNT}/token"})
    if pool_uid:  # the trainer trusts only Services this pool controls (sources/kube.py)
        env.append({"name": POOL_UID_ENV, "value": pool_uid})
    if runs_sglang(spec):
        url = f"http://{names.run_child(run.name, 'sglang')}:{SGLANG_PORT}"
        env.append({"name": "KUBECUA_SGLANG_URLS", "value": url})
    return env


def trainer_command(trainer: TrainerConfig) -> list[str]:
    """The trainer's torchrun (kubecua_trainer.launch) only where there are several processes
    to launch: unlike plain torchrun's agent it passes SIGTERM on to the workers, gives them the
    pod's whole grace period to checkpoint and exits 143 once they did. A single process runs the
    trainer directly (which also exits 143 after a SIGTERM's checkpoint).

    >>> trainer_command(TrainerConfig(nodes=1, gpus_per_node=1))[:3]
    ['python', '-m', 'kubecua_trainer']
    >>> trainer_command(TrainerConfig(nodes=2, gpus_per_node=4))[:5]
    ['python', '-m', 'kubecua_trainer.launch', '--module', 'kubecua_trainer']
    """
    launcher = ["python", "-m"]
    if trainer.nodes * processes_per_node(trainer) > 1:
        launcher += ["kubecua_trainer.launch", "--module"]
    return [*launcher, "kubecua_trainer", "run", f"{CONFIG_DIR}/{CONFIG_FILE}"]


def trainer_resources(trainer: TrainerConfig) -> Obj:
    """User resources plus nvidia.com/gpu limits from gpusPerNode (0 leaves them out)."""
    res = (trainer.resources or TrainerResources()).model_dump(exclude_none=True)
    if trainer.gpus_per_node:
        res.setdefault("limits", {})["nvidia.com/gpu"] = trainer.gpus_per_node
    return res


def volumes_and_mounts(run: Run, pool_token: str | None = None) -> tuple[list[Obj], list[Obj]]:
    spec = run.spec
    config = {"name": names.run_child(run.name, "config")}
    volumes: list[Obj] = [
        {"name": "config", "configMap": config},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        _checkpoint_volume(spec),  # the sglang servers mount the same PVC at the same path
    ]
    mounts: list[Obj] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        _checkpoint_mount(spec),
    ]
    secret = token_secret_name(spec, pool_token)
    if secret:
        volumes.append({"name": "sandbox-token", "secret": {"secretName": secret}})
        mounts.append({"name": "sandbox-token", "mountPath": names.TOKEN_MOUNT, "readOnly": True})
    verified = spec.tasks.verified
    if verified is not None and verified.config_map_ref:
        # Only the manifest's key, as the one file spec.tasks.verified.manifest (subPath: the
        # folder it lies in keeps the rest of its content, e.g. the tasks beside it).
        items = [{"key": MANIFEST_KEY, "path": MANIFEST_KEY}]
        volumes.append(
            {
                "name": "verified-tasks",
                "configMap": {"name": verified.config_map_ref, "items": items},
            }
        )
        mounts.append({"name": "verified-tasks", "mountPath": verified.manifest,
                       "subPath": MANIFEST_KEY, "readOnly": True})  # fmt: skip
    return volumes + _model_volumes(spec), mounts + _model_mounts(spec)


def pod_labels(run: Run) -> dict[str, str]:
    labels = names.run_labels(run.name, "trainer")
    pool = run.spec.sandboxes.pool_ref
    if pool:
        labels[names.client_label(pool)] = "true"
    return labels


def build_job(
    run: Run, settings: Settings, suspend: bool, pool_token: str | None = None, pool_uid: str = ""
) -> Obj:
    """`pool_token`: the bound pool's token Secret (main.pool_readiness), mounted unless
    spec.sandboxes.tokenSecretRef names another; `pool_uid`: the pool's uid, in the trainer's
    environment."""
    spec = run.spec
    nodes = spec.trainer.nodes
    child = names.run_child(run.name, "trainer")
    volumes, mounts = volumes_and_mounts(run, pool_token)
    port = spec.metrics.port
    container: Obj = {
        "name": TRAINER_CONTAINER,
        "image": spec.trainer.image or settings.trainer_image,
        "command": trainer_command(spec.trainer),
        "env": trainer_env(run, pool_token, pool_uid),
        "ports": [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}]
        + ([{"name": "metrics", "containerPort": port}] if port else []),
        "resources": trainer_resources(spec.trainer),
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    labels = names.run_labels(run.name, "trainer")
    if spec.kueue.queue_name:
        labels[names.KUEUE_QUEUE_LABEL] = spec.kueue.queue_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": child, "namespace": run.namespace, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": spec.backoff_limit,
            "podFailurePolicy": pod_failure_policy(),  # needs restartPolicy Never
            "suspend": suspend,
            "template": {
                "metadata": {
                    "labels": pod_labels(run),
                    "annotations": {names.RUN_UID_ANNOTATION: run.uid},
                },
                "spec": {
                    "subdomain": child,
                    "serviceAccountName": child,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 600,  # time to write a checkpoint
                    # The trainer image's own user: torch looks its name up (getpass) at import,
                    # and a uid missing from the image's /etc/passwd makes that fail.
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "fsGroup": 65532,
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }
