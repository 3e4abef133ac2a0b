"""The operator is safe to install in a shared cluster (issue 13, findings 1-4), asked of the real
API server: its ServiceAccount, with the chart's RBAC, holds exactly the verbs the code uses (no
Secret read, no token minting) and the operator works on those alone; admission refuses a
TrainingRun that would mount a Secret its author may not read; a pool never mounts a namesake
Secret someone else made; reserved labels are never copied from a user's pool to its pods.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kubecua_testkit.tools import REPO, binary, run

from .conftest import OPERATOR_DIR, OperatorProcess, wait_until
from .helpers import pool_manifest, sandbox_pods, wait_pool
from .test_trainingrun_lifecycle import run_manifest

CHART = REPO / "charts" / "kubecua"
RELEASE, OP_NS = "audit", "kubecua-audit"
SA = f"system:serviceaccount:{OP_NS}:{RELEASE}-kubecua-operator"
R = {"get", "list", "watch"}
CRUD = {"get", "list", "watch", "create", "patch", "delete"}
APPLY = {"create", "patch"}  # server-side apply: a patch, which may create
OWNED_APPLY = APPLY | {"get"}  # read first: never applied onto someone else's namesake
# Every verb the chart grants, resource by resource (docs/reliability.md says why each).
GRANTED = {
    "sandboxpools.kubecua.dev": {"get", "list", "watch", "patch"},  # get: a verifier's grant
    "trainingruns.kubecua.dev": {"get", "list", "watch", "patch"},
    "taskverifications.kubecua.dev": {"list", "watch"},
    "sandboxpools.kubecua.dev/status": {"patch"},
    "taskverifications.kubecua.dev/status": {"patch"},
    "trainingruns.kubecua.dev/status": {"get", "patch"},
    "pods": CRUD,
    "services": CRUD,
    "endpointslices.discovery.k8s.io": CRUD,
    "secrets": {"create"},
    "configmaps": OWNED_APPLY,
    "serviceaccounts": OWNED_APPLY,
    "events": {"list", "create"},  # list: a trainer Job's FailedCreate
    "networkpolicies.networking.k8s.io": OWNED_APPLY,
    "roles.rbac.authorization.k8s.io": OWNED_APPLY,
    "rolebindings.rbac.authorization.k8s.io": OWNED_APPLY,
    "jobs.batch": {"get", "list", "watch", "create", "patch"},
    "deployments.apps": OWNED_APPLY,
    "virtualmachines.kubevirt.io": {"get", "list", "create", "patch", "delete"},
    "podmonitors.monitoring.coreos.com": OWNED_APPLY,
    "workloads.kueue.x-k8s.io": {"list", "patch"},
    "customresourcedefinitions.apiextensions.k8s.io": {"list", "watch"},
    "namespaces": {"list", "watch"},
}
# What every authenticated account may do (system:basic-user), not the chart's grant.
EVERYONE = {
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    "selfsubjectreviews.authentication.k8s.io",
}


def render(
    *templates: str, sets: tuple[str, ...] = (), release: str = RELEASE, namespace: str = OP_NS
) -> str:
    args: list[Any] = [binary("helm"), "template", release, CHART, "-n", namespace]
    for t in templates:
        args += ["--show-only", f"templates/{t}"]
    for s in sets:
        args += ["--set", s]
    return str(run(args).stdout)


@pytest.fixture(scope="module")
def chart_rbac(cluster: Any, crds: None) -> Iterator[str]:
    """The chart's ServiceAccount, RBAC and admission policies, as `helm install` makes them."""
    cluster.kubectl("create", "namespace", OP_NS, check=False)
    docs = render("serviceaccount.yaml", "rbac.yaml", "admissionpolicies.yaml")
    cluster.kubectl("apply", "-f", "-", input=docs)
    yield docs
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=docs, check=False)
    cluster.kubectl("delete", "namespace", OP_NS, "--wait=false", check=False)


def can_i_list(cluster: Any, namespace: str) -> dict[str, set[str]]:
    """`kubectl auth can-i --list` as the operator: resource -> verbs (name-less rules only)."""
    out = cluster.kubectl("auth", "can-i", "--list", f"--as={SA}", "-n", namespace).stdout
    grants: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        m = re.match(r"^(\S*)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        assert m, f"unparsed line of auth can-i --list: {line!r}"
        resource, _urls, resource_names, verbs = m.groups()
        if resource and not resource_names and resource not in EVERYONE:
            grants.setdefault(resource, set()).update(verbs.split())
    return grants


def test_operator_account_holds_exactly_the_verbs_the_code_uses(cluster, chart_rbac, namespace):
    grants = can_i_list(cluster, namespace)
    extra = {r: sorted(v - GRANTED.get(r, set())) for r, v in grants.items()}
    assert {r: v for r, v in extra.items() if v} == {}, "granted but never used by the code"
    assert grants == GRANTED
    # Secrets: create only; nothing that reads one, anywhere.
    for verb in ("get", "list", "watch", "update", "patch", "delete"):
        assert not allowed(cluster, SA, verb, "secrets", "kube-system")


def allowed(cluster: Any, who: str, verb: str, resource: str, namespace: str) -> bool:
    proc = cluster.kubectl(
        "auth", "can-i", verb, resource, "-n", namespace, f"--as={who}", check=False
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def sa_kubeconfig(cluster: Any, path: Path, release: str = RELEASE, namespace: str = OP_NS) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount (a bound token)."""
    token = cluster.kubectl(
        "create", "token", f"{release}-kubecua-operator", "-n", namespace, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = admin["contexts"][0]["context"]
    server = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": server["cluster"]}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "operator"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def operator_as_its_account(
    cluster: Any, chart_rbac: str, operator: OperatorProcess, token_key: Path, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator with only the chart's grants (the admin-run session operator paused)."""
    operator.stop()
    env = {"KUBECUA_OPERATOR_TOKEN_KEY_FILE": str(token_key)}
    proc = OperatorProcess(sa_kubeconfig(cluster, tmp_path / "sa.yaml"), tmp_path / "op.log", env)
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()
        operator.start()


def test_operator_runs_pools_and_runs_on_the_charts_grants_alone(
    cluster, kube, operator_as_its_account, namespace
):
    kube.create(pool_manifest("desks", namespace, 3))
    wait_pool(kube, namespace, "desks", ready=3, total=3)
    kube.patch("SandboxPool", namespace, "desks", {"spec": {"replicas": 2}})  # deletes a sandbox
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    kube.create(run_manifest(namespace))  # its Role is granted through the escalation check
    wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    children = [("Role", "qwen-trainer"), ("RoleBinding", "qwen-trainer"),
                ("NetworkPolicy", "qwen-run"), ("NetworkPolicy", "desks-sandboxes")]  # fmt: skip
    for kind, name in children:
        assert kube.get(kind, namespace, name), f"{kind} {name}"
    # RBAC denials name the account ("... User \"system:serviceaccount:...\" cannot get
    # resource ..."); other 403s (e.g. writing into a namespace being deleted) are not RBAC's.
    log = operator_as_its_account.log_path.read_text()
    denied = re.findall(rf'{SA.rsplit(":", 1)[1]}\\*"? cannot [a-z]+ resource [^ ]+', log)
    assert denied == []
    # Nor did the chart's admission guard refuse any write of the operator's (its refusals say
    # "ValidatingAdmissionPolicy '<policy>' ... denied request").
    assert re.findall(r"ValidatingAdmissionPolicy '[^']+'", log) == []


def test_admission_refuses_a_token_secret_ref_its_author_may_not_read(
    cluster, kube, chart_rbac, namespace
):
    kube.create(secret("db-sandbox-token", namespace, b"hunter2-hunter2-hunter2"))
    alice = "alice@example.com"
    grant_user(cluster, namespace, alice, ["trainingruns", "sandboxpools"], ["create", "get"])
    run = run_manifest(
        namespace, sandboxes={"poolRef": "desks", "tokenSecretRef": "db-sandbox-token"}
    )

    def refused(who: str, obj: dict) -> str:
        proc = cluster.kubectl(
            "create", "--dry-run=server", f"--as={who}", "-f", "-",
            input=yaml.safe_dump(obj), check=False,
        )  # fmt: skip
        return str(proc.stderr) if proc.returncode else ""

    message = wait_until(lambda: refused(alice, run), 30, "the policy to be active")
    assert "spec.sandboxes.tokenSecretRef: Secret db-sandbox-token would be mounted" in message
    assert "you may not read it yourself" in message
    # Someone who may read that one Secret (and the run's pool and tasks) may name it.
    grant_user(
        cluster, namespace, "bob@example.com", ["trainingruns", "sandboxpools"], ["create", "get"]
    )
    grant_secret(cluster, namespace, "bob@example.com", "db-sandbox-token", "osworld")
    wait_until(lambda: not refused("bob@example.com", run), 30, "bob's Secret read to count")
    # An external pool mounts its owner's <pool>-sandbox-token into trainers: same rule.
    endpoints = {"external": {"endpoints": ["http://10.0.0.1:8000"]}}
    external = pool_manifest("db", namespace, 1, backend="external", desktop=endpoints)
    assert "Secret db-sandbox-token would be mounted" in refused(alice, external)
    assert refused(alice, pool_manifest("desks", namespace, 1)) == ""  # pod pools: own token


def test_operator_account_cannot_mint_tokens_or_privileged_pods(cluster, chart_rbac, namespace):
    def refused(obj: dict, ns: str = namespace) -> str:
        proc = cluster.kubectl(
            "create", "--dry-run=server", f"--as={SA}", "-n", ns, "-f", "-",
            input=yaml.safe_dump(obj), check=False,
        )  # fmt: skip
        return str(proc.stderr) if proc.returncode else ""

    mint = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "admin-token",
                     "annotations": {"kubernetes.io/service-account.name": "default"}},
        "type": "kubernetes.io/service-account-token",
    }  # fmt: skip
    message = wait_until(lambda: refused(mint), 30, "the guard policy to be active")
    assert "only Secrets of type kubecua.dev/sandbox-token" in message
    own = {**secret("p-sandbox-token-x", namespace, b"t" * 32), "type": "kubecua.dev/sandbox-token"}
    del own["metadata"]["namespace"]  # -n decides
    assert refused(own) == ""
    assert "nothing in kube-system" in refused(own, "kube-system")
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "x",
                                 "securityContext": {"privileged": True}}]},
    }  # fmt: skip
    assert "kubecua pods run no privileged containers" in refused(pod)
    host = {**pod, "spec": {"hostPID": True, "containers": [{"name": "c", "image": "x"}]}}
    assert "kubecua pods use no host namespaces" in refused(host)
    # The rest of the guard: tests/test_admission_guard.py.


def test_pool_never_mounts_a_namesake_secret_someone_else_made(kube, operator, namespace):
    victim = b"someone-elses-password"
    kube.create(secret("desks-sandbox-token", namespace, victim))  # made before the pool
    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    uid = kube.get("SandboxPool", namespace, "desks")["metadata"]["uid"]
    (pod,) = sandbox_pods(kube, namespace, "desks")
    (mounted,) = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v]
    assert mounted == f"desks-sandbox-token-{uid.replace('-', '')[:10]}"
    own = kube.get("Secret", namespace, mounted)
    assert own["type"] == "kubecua.dev/sandbox-token"
    assert len(base64.b64decode(own["data"]["token"])) >= 32
    untouched = kube.get("Secret", namespace, "desks-sandbox-token")
    assert base64.b64decode(untouched["data"]["token"]) == victim


def test_reserved_labels_of_a_pool_never_reach_its_pods(kube, operator, namespace):
    labels = {
        "kubecua.dev/client-of-victim": "true",  # would pass pool victim's NetworkPolicy
        "app.kubernetes.io/name": "kubecua-operator",  # would pass as the operator
        "team": "vision",
    }
    pool = pool_manifest("desks", namespace, 1)
    pool["metadata"]["labels"] = labels
    kube.create(pool)
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    (pod,) = sandbox_pods(kube, namespace, "desks")
    got = pod["metadata"]["labels"]
    assert got["team"] == "vision"
    assert "kubecua.dev/client-of-victim" not in got
    assert got.get("app.kubernetes.io/name") != "kubecua-operator"
    policy = kube.get("NetworkPolicy", namespace, "desks-sandboxes")
    operator_peer = policy["spec"]["ingress"][1]["from"][0]
    assert operator_peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "kubecua-system"}
    }


def test_run_pods_get_a_network_policy_of_their_own(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 1))
    kube.create(
        run_manifest(namespace, rollout={"engine": "sglang"}, checkpoint={"volume": "ckpt"})
    )
    policy = wait_until(lambda: kube.get("NetworkPolicy", namespace, "qwen-run"), 60, "policy")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"kubecua.dev/trainingrun": "qwen"}
    sglang = wait_until(lambda: kube.get("Deployment", namespace, "qwen-sglang"), 60, "sglang")
    template = sglang["spec"]["template"]["metadata"]["labels"]
    assert template["kubecua.dev/trainingrun"] == "qwen"  # selected: only the run reaches it
    assert policy["spec"]["ingress"][0] == {"from": [{"podSelector": {"matchLabels": selector}}]}


def test_operator_refuses_to_start_with_a_key_under_16_bytes(tmp_path):
    key = tmp_path / "key"
    key.write_text("fifteen-bytes!!")
    proc = subprocess.run(
        [sys.executable, "-m", "kubecua_operator"],
        cwd=OPERATOR_DIR, capture_output=True, text=True, timeout=60,
        env={"KUBECUA_OPERATOR_TOKEN_KEY_FILE": str(key), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 2
    assert "15 bytes, need >= 16" in proc.stderr


def secret(name: str, namespace: str, token: bytes) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"token": base64.b64encode(token).decode()},
    }


def grant_user(cluster: Any, namespace: str, user: str, resources: list[str], verbs: list[str]):
    name = f"u-{uuid.uuid4().hex[:6]}"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": ["kubecua.dev"], "resources": resources, "verbs": verbs}],
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(role))
    cluster.kubectl("create", "rolebinding", name, f"--role={name}", f"--user={user}",
                    "-n", namespace)  # fmt: skip


def grant_secret(
    cluster: Any, namespace: str, user: str, secret_name: str, config_map: str
) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-one", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                   "resourceNames": [secret_name]},
                  {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                   "resourceNames": [config_map]}],
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(role))
    cluster.kubectl("create", "rolebinding", "read-one", "--role=read-one", f"--user={user}",
                    "-n", namespace)  # fmt: skip


def test_health_fails_while_rbac_denies_the_operator_everything(
    cluster, kube, chart_rbac, operator, token_key, tmp_path, namespace
):
    """Issue 35: with its ClusterRoleBinding gone, /healthz stayed 200 while every status went
    stale. It fails once every request has been denied for the grace period, and recovers."""
    operator.stop()
    env = {"KUBECUA_OPERATOR_TOKEN_KEY_FILE": str(token_key),
           "KUBECUA_OPERATOR_API_GRACE_SECONDS": "3"}  # fmt: skip
    proc = OperatorProcess(sa_kubeconfig(cluster, tmp_path / "sa.yaml"), tmp_path / "op.log", env)
    binding = f"{RELEASE}-kubecua-operator"
    try:
        proc.start()
        kube.create(pool_manifest("desks", namespace, 1))
        wait_pool(kube, namespace, "desks", ready=1, total=1)
        cluster.kubectl("delete", "clusterrolebinding", binding)
        wait_until(lambda: not healthy(proc), 90, "/healthz to fail")
        cluster.kubectl("apply", "-f", "-", input=chart_rbac)  # the binding back
        wait_until(lambda: healthy(proc), 90, "/healthz to recover")
    finally:
        cluster.kubectl("apply", "-f", "-", input=chart_rbac, check=False)
        proc.stop()
        operator.start()


def healthy(proc: OperatorProcess) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{proc.health_port}/healthz", timeout=2).is_success
    except httpx.HTTPError:
        return False
