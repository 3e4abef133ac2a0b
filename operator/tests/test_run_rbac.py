"""The Role the operator makes for a TrainingRun, asked of the real API server's authorizer with
`kubectl auth can-i --as=system:serviceaccount:<ns>:<run>-trainer`: the trainer may get its
pool's token Secret by name (and no other Secret; never list or watch Secrets), and patch its own
TrainingRun's status (not its spec, not another run's status).
"""

from __future__ import annotations

from .conftest import wait_until
from .test_trainingrun_lifecycle import run_manifest


def allowed(cluster, namespace: str, *what: str) -> bool:
    """`kubectl auth can-i`: exit 0 is yes, 1 is no; anything else is an error."""
    sa = f"system:serviceaccount:{namespace}:qwen-trainer"
    proc = cluster.kubectl("auth", "can-i", *what, "-n", namespace, f"--as={sa}", check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def wait_binding(cluster, kube, namespace: str) -> None:
    """Until the RoleBinding exists and the authorizer's cache has seen it."""
    wait_until(lambda: kube.get("RoleBinding", namespace, "qwen-trainer"), 60, "the RoleBinding")
    own = ("get", "trainingruns.kubecua.dev/qwen")
    wait_until(lambda: allowed(cluster, namespace, *own), 30, "the authorizer to see the Role")


def test_trainer_gets_its_pool_token_by_name_and_patches_its_own_status(
    cluster, kube, operator, namespace
):
    kube.create(run_manifest(namespace))  # poolRef desks: the token is desks-sandbox-token
    wait_binding(cluster, kube, namespace)
    yes = [
        ("get", "secret/desks-sandbox-token"),
        ("patch", "trainingruns.kubecua.dev/qwen", "--subresource=status"),
        ("get", "trainingruns.kubecua.dev/qwen"),
        ("get", "configmap/qwen-config"),
        ("get", "configmap/osworld"),  # spec.tasks.configMapRef
        ("list", "endpointslices.discovery.k8s.io"),
    ]
    no = [
        ("get", "secret/other-token"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("get", "secrets"),  # get without a name is a list
        ("update", "secret/desks-sandbox-token"),
        ("patch", "trainingruns.kubecua.dev/qwen"),  # the spec is the user's
        ("patch", "trainingruns.kubecua.dev/other", "--subresource=status"),
        ("create", "pods"),
    ]
    assert [w for w in yes if not allowed(cluster, namespace, *w)] == []
    assert [w for w in no if allowed(cluster, namespace, *w)] == []


def test_token_secret_ref_replaces_the_pool_token(cluster, kube, operator, namespace):
    sandboxes = {"poolRef": "desks", "minReady": 2, "tokenSecretRef": "my-token"}
    kube.create(run_manifest(namespace, sandboxes=sandboxes))
    wait_binding(cluster, kube, namespace)
    assert allowed(cluster, namespace, "get", "secret/my-token")
    assert not allowed(cluster, namespace, "get", "secret/desks-sandbox-token")
    assert not allowed(cluster, namespace, "list", "secrets")
