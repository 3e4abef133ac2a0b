"""The admission guard at its edges (issue 35), on the real API server, acting as the operator's
ServiceAccount (impersonation): it adds endpoints only to a Service it made for that pool, runs a
trainer only as the account it made for that run, writes workloads that meet Pod Security
"baseline", writes only its own NetworkPolicy names and shapes, mounts no token into a tokenless
pod, and adds no finalizer or label to a pool or run.

Each rule is tried both ways: what the operator's builders make is admitted, the attack refused
with the rule's words. Refused writes are dry runs (nothing is stored).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubecua_operator import names
from kubecua_operator.k8s import adopt
from kubecua_operator.sandboxpool import children as pool_children
from kubecua_operator.sandboxpool.backends import external
from kubecua_operator.sandboxpool.model import parse_pool
from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun import children as run_children
from kubecua_operator.trainingrun.model import parse

from .conftest import wait_until
from .helpers import pool_manifest
from .test_admission_guard import (
    Obj,
    acting_as,
    create,
    owned_run,
    patch,
    refusal,
    trainer_job,
    wait_default_account,
    with_pod,
)
from .test_security import render

# A release of its own: another module's guard namespace may still be terminating.
RELEASE, OP_NS = "edges", "kubecua-edges"
OPERATOR = f"system:serviceaccount:{OP_NS}:{RELEASE}-kubecua-operator"
FOREIGN_SERVICE = "is not a sandbox Service the kubecua operator made"
IDENTITY = "is not an account the kubecua operator made for"
BASELINE = {
    "selinux": "no type but container_t",
    "profile": "never Unconfined",
    "sysctl": "only the safe sysctls",
    "proc": "procMount Default",
    "escalation": "allow no privilege escalation",
}


@pytest.fixture(scope="module")
def edges(cluster: Any, crds: None) -> Iterator[None]:
    """The chart's ServiceAccount, RBAC and admission policies (default values), in effect."""
    cluster.kubectl("create", "namespace", OP_NS, check=False)
    docs = render(
        "serviceaccount.yaml", "rbac.yaml", "admissionpolicies.yaml",
        release=RELEASE, namespace=OP_NS,
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=docs)
    op = acting_as(cluster, OPERATOR)
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}
    wait_until(lambda: "kube-system" in refusal(create, op, probe, "kube-system"), 30, "the guard")
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=docs, check=False)
    cluster.kubectl("delete", "namespace", OP_NS, "--wait=false", check=False)


def external_pool(name: str, namespace: str) -> Obj:
    return pool_manifest(name, namespace, 1, backend="external",
                         desktop={"external": {"endpoints": ["http://10.0.0.5:8000"]}})  # fmt: skip


def test_operator_adds_endpoints_only_to_a_service_it_made_for_that_pool(
    cluster, kube, edges, namespace
):
    """Finding 1: a slice named like its Service `<pool>-<digits>` was admitted for any Service
    of that name, here another team's `db-0`."""
    kube.create({"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "db-0", "namespace": namespace},
                 "spec": {"ports": [{"port": 5432}]}})  # fmt: skip
    op = acting_as(cluster, OPERATOR)
    hijack = external.build_slice(parse_pool(external_pool("db", namespace)), 0, ready=True)
    assert hijack["metadata"]["labels"]["kubernetes.io/service-name"] == "db-0"
    message = wait_until(lambda: refusal(create, op, hijack, namespace), 30, "the policy")
    assert f"EndpointSlice db-0: Service db-0 {FOREIGN_SERVICE} for pool db" in message
    # Without the operator's marks (its label, the sandbox's), the name shape alone is refused
    # (a slice for no Service yet, which the endpoints policy admits).
    unmarked = external.build_slice(parse_pool(external_pool("ghost", namespace)), 0, ready=True)
    del unmarked["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    assert "labelled as its own" in refusal(create, op, unmarked, namespace)

    # A pool's own: the Service it made (stored, so that the policy reads it), then the slice.
    kube.create(external_pool("desks", namespace))
    pool = wait_until(lambda: kube.get("SandboxPool", namespace, "desks"), 30, "the pool")
    service = pool_children.build_sandbox_service("desks", namespace, "desks-0", selector=False)
    create(op, adopt(service, pool), namespace, dry=False)
    own = external.build_slice(parse_pool(pool), 0, ready=True)
    wait_until(lambda: refusal(create, op, adopt(own, pool), namespace) == "", 30, "the Service")
    # Someone relabels that Service away from the pool: its slices are refused from then on.
    kube.patch("Service", namespace, "desks-0", {"metadata": {"labels": {names.POOL_LABEL: "x"}}})
    message = wait_until(lambda: refusal(create, op, adopt(own, pool), namespace), 30, "relabel")
    assert FOREIGN_SERVICE in message


def grant_account(cluster: Any, namespace: str, account: str, rules: list[Obj]) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": account, "namespace": namespace}, "rules": rules,
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(role))
    cluster.kubectl("create", "rolebinding", account, f"--role={account}",
                    f"--serviceaccount={namespace}:{account}", "-n", namespace)  # fmt: skip


def test_a_trainer_runs_only_as_the_account_the_operator_made_for_its_run(
    cluster, kube, edges, namespace
):
    """Finding 2: an existing `<run>-trainer` account that may list Secrets, read one by name,
    create Jobs or mint tokens passed the authorizer checks, and real pods ran with it."""
    op = acting_as(cluster, OPERATOR)
    wait_default_account(kube, namespace)
    run = owned_run(kube, namespace)
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "qwen-trainer", "namespace": namespace}})  # fmt: skip
    grant_account(cluster, namespace, "qwen-trainer", [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
         "resourceNames": ["db-password"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    ])  # fmt: skip
    job = trainer_job(run)
    message = wait_until(lambda: refusal(create, op, job, namespace), 30, "the SA as a parameter")
    assert f"serviceAccountName: qwen-trainer {IDENTITY} TrainingRun qwen" in message
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "qwen-trainer-x", **job["spec"]["template"]["metadata"]},
        "spec": job["spec"]["template"]["spec"],
    }  # fmt: skip
    assert IDENTITY in refusal(create, op, pod, namespace)

    # The account the operator makes for the run: labelled by it, controlled by the run.
    kube.delete("ServiceAccount", namespace, "qwen-trainer")
    cluster.kubectl("delete", "rolebinding", "qwen-trainer", "-n", namespace)
    wait_until(lambda: kube.get("ServiceAccount", namespace, "qwen-trainer") is None, 30, "gone")
    account = adopt(run_children.build_service_account(parse(run)), run)
    assert op.apply(account)["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    wait_until(lambda: refusal(create, op, job, namespace) == "", 30, "the operator's account")
    # ...and only for pods that name that run's uid (and a Job controlled by it).
    other = with_pod(job, lambda p: None)
    other["spec"]["template"]["metadata"]["annotations"][names.RUN_UID_ANNOTATION] = "f" * 36
    message = refusal(create, op, other, namespace)  # either rule may speak first
    assert IDENTITY in message or "the TrainingRun that controls the Job" in message, message
    # The real trainer: the Job controller makes its pod, which runs as that account.
    create(op, job, namespace, dry=False)
    selector = f"{names.RUN_LABEL}=qwen,job-name=qwen-trainer"
    (trainer,) = wait_until(lambda: kube.list("Pod", namespace, selector), 60, "the trainer pod")
    assert trainer["spec"]["serviceAccountName"] == "qwen-trainer"


def test_operator_workloads_meet_pod_security_baseline(cluster, kube, edges, namespace):
    """Finding 3: pods with spc_t, Unconfined seccomp or AppArmor, an unsafe sysctl, an
    unmasked /proc or privilege escalation were admitted."""
    op = acting_as(cluster, OPERATOR)
    run = owned_run(kube, namespace)
    job = trainer_job(run)
    assert refusal(create, op, job, namespace) == ""

    def container(**ctx: Any) -> Any:
        return lambda p: p["containers"][0]["securityContext"].update(ctx)

    def apparmor(p: Obj) -> None:
        p["securityContext"]["appArmorProfile"] = {"type": "Unconfined"}

    cases = [
        (lambda p: p["securityContext"].update(seLinuxOptions={"type": "spc_t"}), "selinux"),
        (container(seLinuxOptions={"user": "system_u"}), "selinux"),
        (lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}), "profile"),
        (container(seccompProfile={"type": "Unconfined"}), "profile"),
        (apparmor, "profile"),
        (lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
         "sysctl"),
        (lambda p: (p.update(hostUsers=False), container(procMount="Unmasked")(p)), "proc"),
        (container(allowPrivilegeEscalation=True, runAsNonRoot=False, runAsUser=0),
         "escalation"),
    ]  # fmt: skip
    for change, rule_ in cases:
        message = refusal(create, op, with_pod(job, change), namespace)
        assert BASELINE[rule_] in message, (rule_, message)
    # The sglang Deployment (whose container sets no other context) is admitted as built.
    deployment = adopt(run_children.build_sglang(parse(run), Settings())[0], run)
    assert refusal(create, op, deployment, namespace) == ""


def test_operator_writes_only_its_own_network_policies_and_no_token_into_tokenless_pods(
    cluster, kube, edges, namespace
):
    """Finding 7: an extra allow-all policy selecting a pool's sandboxes opened them; a tokenless
    default-account pod took an explicit projected token; the operator could add finalizers
    and labels to any pool or run."""
    op = acting_as(cluster, OPERATOR)
    own = pool_children.build_network_policy("desks", namespace, [], OP_NS, [5000])
    assert refusal(create, op, own, namespace) == ""
    run = owned_run(kube, namespace)
    assert refusal(create, op, run_children.build_network_policy(parse(run)), namespace) == ""
    extra = copy.deepcopy(own)
    extra["metadata"]["name"] = "desks-open"
    extra["spec"]["ingress"] = [{}]
    assert "are <pool>-sandboxes selecting" in refusal(create, op, extra, namespace)
    opened = copy.deepcopy(own)
    opened["spec"]["ingress"].append({"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})
    assert "admit ingress from pods they select" in refusal(create, op, opened, namespace)
    everything = copy.deepcopy(own)
    everything["spec"]["ingress"].append({})
    assert "admit ingress from pods they select" in refusal(create, op, everything, namespace)

    deployment = adopt(run_children.build_sglang(parse(run), Settings())[0], run)
    token = {"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}  # fmt: skip
    tokened = with_pod(deployment, lambda p: p.setdefault("volumes", []).append(token))
    assert "mount none (no projected serviceAccountToken" in refusal(create, op, tokened, namespace)

    finalizer = {"metadata": {"finalizers": ["example.com/hold"]}}
    assert "adds no finalizer" in refusal(patch, op, "TrainingRun", namespace, "qwen", finalizer)
    label = {"metadata": {"labels": {"team": "b"}}}
    assert "changes no label" in refusal(patch, op, "TrainingRun", namespace, "qwen", label)
