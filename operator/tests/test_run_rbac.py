"""The Role the operator makes for a TrainingRun, asked of the real API server's authorizer with
`kubectl auth can-i --as=system:serviceaccount:<ns>:<run>-trainer`: the trainer reads no Secret
at all (its token is a mounted file), and patches its own TrainingRun's status (not its spec, not
another run's status).
"""

from __future__ import annotations

from .conftest import wait_until
from .helpers import pool_manifest, wait_pool
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


def test_trainer_reads_no_secret_and_patches_only_its_own_status(
    cluster, kube, operator, namespace
):
    kube.create(run_manifest(namespace))
    wait_binding(cluster, kube, namespace)
    yes = [
        ("patch", "trainingruns.kubecua.dev/qwen", "--subresource=status"),
        ("get", "trainingruns.kubecua.dev/qwen"),
        ("get", "configmap/qwen-config"),
        ("get", "configmap/osworld"),  # spec.tasks.configMapRef
        ("list", "endpointslices.discovery.k8s.io"),
        ("watch", "endpointslices.discovery.k8s.io"),
        ("list", "services"),  # the pool's own Services, told from others' (issue 42)
        ("get", "services"),
    ]
    no = [
        ("get", "secret/desks-sandbox-token"),
        ("get", "secret/other-token"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("get", "secrets"),  # get without a name is a list
        ("update", "secret/desks-sandbox-token"),
        ("patch", "trainingruns.kubecua.dev/qwen"),  # the spec is the user's
        ("patch", "trainingruns.kubecua.dev/other", "--subresource=status"),
        ("create", "pods"),
        ("watch", "services"),  # least privilege: discovery never watches Services
        ("get", "endpointslices.discovery.k8s.io"),
    ]
    assert [w for w in yes if not allowed(cluster, namespace, *w)] == []
    assert [w for w in no if allowed(cluster, namespace, *w)] == []


def test_token_secret_ref_is_mounted_instead_of_the_pool_token(cluster, kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    sandboxes = {"poolRef": "desks", "minReady": 2, "tokenSecretRef": "my-sandbox-token"}
    kube.create(run_manifest(namespace, sandboxes=sandboxes))
    job = wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert [v["secret"]["secretName"] for v in volumes if "secret" in v] == ["my-sandbox-token"]
    wait_binding(cluster, kube, namespace)
    assert not allowed(
        cluster, namespace, "get", "secret/my-sandbox-token"
    )  # a file, not an API read
