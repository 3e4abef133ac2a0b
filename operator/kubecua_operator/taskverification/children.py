"""Pure constructors of a TaskVerification's children; owner references are added by the caller.

Names: ServiceAccount, Role, RoleBinding and Job `<name>-verifier`; ConfigMap `<name>-manifest`
(made empty by the operator; the verifier writes the manifest into it, key verified.json).

The verifier reads the pool as a trainer does (trainer/kubecua_trainer/sources/kube.py, and
sandbox-image/tasks/kubecua_tasks' pool discovery): the pool's EndpointSlices, listed and
watched, their Services, and the pool itself for its uid; its token comes as a mounted file from
the Secret the pool's backend names (main.pool_readiness), never through the API. The Role names
the pool and the manifest ConfigMap by resourceNames wherever a verb allows it (list and watch
cannot be narrowed by name).
"""

from __future__ import annotations

from typing import Any

from kubecua_api.taskverification import MANIFEST_KEY, TaskVerificationSpec
from kubecua_operator import names
from kubecua_operator.parsed import Parsed
from kubecua_operator.settings import Settings

Obj = dict[str, Any]
Verification = Parsed[TaskVerificationSpec]
VERIFIER = "verifier"
VERIFIER_CONTAINER = "verifier"
OUT_DIR = "/tmp"  # an emptyDir: the image's task folders are read-only
MANIFEST_PATH = f"{OUT_DIR}/{MANIFEST_KEY}"
TOKEN_FILE = f"{names.TOKEN_MOUNT}/{names.TOKEN_KEY}"
VERIFIER_UID = 65532  # the tasks image's own user (sandbox-image/tasks/Dockerfile)


def verifier_name(name: str) -> str:
    return f"{name}-verifier"


def manifest_name(name: str) -> str:
    return f"{name}-manifest"


def _meta(v: Verification, name: str, component: str) -> Obj:
    return {
        "name": name,
        "namespace": v.namespace,
        "labels": names.verification_labels(v.name, component),
    }


def build_manifest_config_map(v: Verification) -> Obj:
    """Empty until the verifier writes the manifest into it (made once, never applied again:
    an apply would not remove the verifier's key, but nothing needs correcting either)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(v, manifest_name(v.name), "manifest"),
    }


def build_service_account(v: Verification) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(v, verifier_name(v.name), VERIFIER),
        "automountServiceAccountToken": True,
    }


def build_role(v: Verification) -> Obj:
    """Discover the pool's sandboxes (its EndpointSlices, their Services, the pool's uid) and
    write the manifest into its own ConfigMap; nothing more. No Secret: the token is a file."""
    pool, manifest = v.spec.pool_ref, manifest_name(v.name)
    rules: list[Obj] = [
        {"apiGroups": [names.GROUP], "resources": ["sandboxpools"], "resourceNames": [pool],
         "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [manifest],
         "verbs": ["get", "patch"]},
    ]  # fmt: skip
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(v, verifier_name(v.name), VERIFIER),
        "rules": rules,
    }


def build_role_binding(v: Verification) -> Obj:
    child = verifier_name(v.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(v, child, VERIFIER),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": child},
        "subjects": [{"kind": "ServiceAccount", "name": child, "namespace": v.namespace}],
    }


def verifier_command(v: Verification) -> list[str]:
    """kubecua_tasks.verify_job runs `kubecua tasks verify` and then writes the manifest it made
    into the ConfigMap (exit status: verify's).

    >>> from kubecua_api.taskverification import TaskVerificationSpec
    >>> spec = TaskVerificationSpec(pool_ref="desks", tasks={"path": "/t"}, repeats=3)
    >>> body = {"metadata": {"name": "ck", "namespace": "ns"}}
    >>> " ".join(verifier_command(Parsed(body, spec)))  # doctest: +NORMALIZE_WHITESPACE
    'python -m kubecua_tasks.verify_job --config-map ck-manifest --namespace ns --
     tasks verify /t --pool desks --namespace ns --token-file /var/run/kubecua/sandbox-token/token
     --repeats 3 --manifest /tmp/verified.json'
    """
    spec = v.spec
    verify = ["tasks", "verify", spec.tasks.path, "--pool", spec.pool_ref,
              "--namespace", v.namespace, "--token-file", TOKEN_FILE,
              "--repeats", str(spec.repeats), "--manifest", MANIFEST_PATH]  # fmt: skip
    if spec.parallelism:
        verify += ["--max-sandboxes", str(spec.parallelism)]
    if spec.accessibility_tree:
        verify.append("--a11y")
    job = ["python", "-m", "kubecua_tasks.verify_job", "--config-map", manifest_name(v.name),
           "--namespace", v.namespace, "--"]  # fmt: skip
    return job + verify


def pod_labels(v: Verification) -> dict[str, str]:
    """Its own labels, and the pool's client label: the pool's NetworkPolicy admits it."""
    return {
        **names.verification_labels(v.name, VERIFIER),
        names.client_label(v.spec.pool_ref): "true",
    }


def build_job(v: Verification, settings: Settings, pool_token: str) -> Obj:
    """One pod, restartPolicy Never; spec.backoffLimit more after a failure, for at most
    spec.timeoutSeconds. The container's last log lines become its termination message on an
    error, which the status quotes."""
    spec, child = v.spec, verifier_name(v.name)
    resources = spec.resources.model_dump(exclude_none=True) if spec.resources else {}
    container: Obj = {
        "name": VERIFIER_CONTAINER,
        "image": spec.image or settings.tasks_image,
        "command": verifier_command(v),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},  # progress reaches the log as it happens
            {"name": "HOME", "value": OUT_DIR},
        ],
        "resources": resources,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "out", "mountPath": OUT_DIR},
            {"name": "sandbox-token", "mountPath": names.TOKEN_MOUNT, "readOnly": True},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(v, child, VERIFIER),
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": spec.backoff_limit,
            "activeDeadlineSeconds": spec.timeout_seconds,
            "template": {
                "metadata": {
                    "labels": pod_labels(v),
                    "annotations": {names.VERIFICATION_UID_ANNOTATION: v.uid},
                },
                "spec": {
                    "serviceAccountName": child,
                    "restartPolicy": "Never",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": VERIFIER_UID,
                        "runAsGroup": VERIFIER_UID,
                    },
                    "containers": [container],
                    "volumes": [
                        {"name": "out", "emptyDir": {}},
                        {"name": "sandbox-token", "secret": {"secretName": pool_token}},
                    ],
                },
            },
        },
    }
