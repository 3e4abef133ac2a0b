"""The chart's admission guard on the real API server (issue 20): acting as the operator's own
ServiceAccount (impersonation), every write the guard forbids is refused with the message of the
rule, and every object the operator's builders make is admitted; acting as a user who may only
create TrainingRuns, a run that names a PVC, ConfigMap or pool she may not use is refused at
admission and nothing is created.

Refused writes are sent as dry runs (`dryRun=All` runs admission and stores nothing), so a guard
that let one through would leave nothing behind, in kube-system least of all.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from kubecua_operator import names
from kubecua_operator.k8s import MERGE, Kube, adopt
from kubecua_operator.sandboxpool import children as pool_children
from kubecua_operator.sandboxpool.backends import external, kubevirt
from kubecua_operator.sandboxpool.backends.pod import build_pod
from kubecua_operator.sandboxpool.model import parse_pool
from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun import children as run_children
from kubecua_operator.trainingrun.job import build_job
from kubecua_operator.trainingrun.model import parse
from kubecua_operator.trainingrun.reconcile import static_children

from .conftest import wait_until
from .helpers import pool_manifest
from .test_security import render
from .test_trainingrun_lifecycle import run_manifest

# Not test_security's release: its namespace may still be terminating when this module starts.
RELEASE, OP_NS = "guard", "kubecua-guard"
OPERATOR = f"system:serviceaccount:{OP_NS}:{RELEASE}-kubecua-operator"

ALICE = "alice@example.com"  # may create TrainingRuns (and what each test grants), no more
Obj = dict[str, Any]

# The rules, by the words of their refusals.
NAMESPACES = "nothing in kube-system"
OWNED = "changes or deletes only objects it owns"
POD_SPEC = "changes only a pod's metadata"
PRIVILEGED = "run no privileged containers"
HOST_NS = "use no host namespaces"
HOST_PATH = "mount no hostPath volumes"
CAPS = "add no capabilities"
SECRET = "mount no Secret but a pool token"
CONFIG_MAP = "mount no ConfigMap but their run's own"
ENV = "take no environment from Secrets or ConfigMaps"
ACCOUNT = "serviceAccountName: kubecua pods run as their run's <run>-trainer"
POWERFUL = "may read Secrets: a trainer's ServiceAccount may not"
LABEL = "only the operator sets it"


@pytest.fixture(scope="module")
def guard(cluster: Any, crds: None) -> Iterator[None]:
    """The chart's ServiceAccount, RBAC and admission policies (default values), in effect."""
    cluster.kubectl("create", "namespace", OP_NS, check=False)
    docs = render(
        "serviceaccount.yaml",
        "rbac.yaml",
        "admissionpolicies.yaml",
        release=RELEASE,
        namespace=OP_NS,
    )
    cluster.kubectl("apply", "-f", "-", input=docs)
    op = acting_as(cluster, OPERATOR)
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}
    wait_until(lambda: NAMESPACES in refusal(create, op, probe, "kube-system"), 30, "the guard")
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=docs, check=False)
    cluster.kubectl("delete", "namespace", OP_NS, "--wait=false", check=False)


def acting_as(cluster: Any, user: str) -> Kube:
    """The operator's REST helper, impersonating `user` (a ServiceAccount's username gets its
    groups from the API server)."""
    api = cluster.api_client()
    api.set_default_header("Impersonate-User", user)
    return Kube(api)


def create(api: Kube, obj: Obj, namespace: str, dry: bool = True) -> Any:
    """POST `obj` into `namespace`. A create that finds the name taken (409: the session's
    operator, if running, made it first) was admitted all the same: admission runs before
    storage, dry run or not."""
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    try:
        return api.request("POST", api.path(obj["kind"], namespace) + dry * "?dryRun=All", obj)
    except ApiException as err:
        if err.status == 409:
            return None
        raise


def patch(api: Kube, kind: str, namespace: str, name: str, body: Obj, dry: bool = True) -> Any:
    return api.request("PATCH", api.path(kind, namespace, name) + dry * "?dryRun=All", body, MERGE)


def set_image(api: Kube, namespace: str, pod: str, container: str, image: str) -> Any:
    """What `kubectl set image` sends: a strategic merge patch of one container's image (a pod
    allows that change, so only admission can refuse it)."""
    body = {"spec": {"containers": [{"name": container, "image": image}]}}
    path = api.path("Pod", namespace, pod) + "?dryRun=All"
    return api.request("PATCH", path, body, "application/strategic-merge-patch+json")


def delete(api: Kube, kind: str, namespace: str, name: str) -> Any:
    return api.request("DELETE", api.path(kind, namespace, name) + "?dryRun=All", {})


def refusal(call: Callable[..., Any], *args: Any) -> str:
    """The API server's message when `call` is refused (403/422), '' when it is admitted."""
    try:
        call(*args)
    except ApiException as err:
        if err.status in (403, 422):
            return str(json.loads(err.body).get("message", err.body))
        raise
    return ""


def grant(cluster: Any, namespace: str, user: str, rules: list[Obj]) -> None:
    name = f"u-{uuid.uuid4().hex[:6]}"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace}, "rules": rules,
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(role))
    cluster.kubectl(
        "create", "rolebinding", name, f"--role={name}", f"--user={user}", "-n", namespace
    )


def rule(group: str, resource: str, verbs: list[str], names_: tuple[str, ...] = ()) -> Obj:
    out: Obj = {"apiGroups": [group], "resources": [resource], "verbs": verbs}
    if names_:
        out["resourceNames"] = list(names_)
    return out


def owned_run(kube: Kube, namespace: str, **spec: Any) -> Obj:
    """A stored TrainingRun (the owner of what the builders make), made by the test's admin."""
    kube.create(run_manifest(namespace, **spec))
    return wait_until(lambda: kube.get("TrainingRun", namespace, "qwen"), 30, "the run")


def trainer_job(run: Obj, uid: str = "0123456789abcdef") -> Obj:
    pool = run["spec"]["sandboxes"].get("poolRef") or ""
    token = names.own_token_secret(pool, uid)  # a pod pool's, as main.pool_readiness names it
    return adopt(build_job(parse(run), Settings(), suspend=False, pool_token=token), run)


def with_pod(job: Obj, change: Callable[[Obj], None]) -> Obj:
    """A copy of a workload whose pod spec `change` edits in place."""
    out = copy.deepcopy(job)
    change(out["spec"]["template"]["spec"])
    return out


def wait_default_account(kube: Kube, namespace: str) -> None:
    wait_until(lambda: kube.get("ServiceAccount", namespace, "default"), 30, "the default SA")


def test_every_object_the_operator_builds_is_admitted(cluster, kube, guard, namespace):
    op = acting_as(cluster, OPERATOR)
    wait_default_account(kube, namespace)
    run = owned_run(kube, namespace, rollout={"engine": "sglang"}, checkpoint={"volume": "ckpt"})
    # The run's children, for real and as the operator writes them (server-side apply, which
    # creates): its Job's pods are made by the Job controller and its Deployment's by the
    # ReplicaSet controller, each checked by the workloads policy.
    for obj in static_children(parse(run), with_pod_monitor=False):
        assert op.apply(adopt(obj, run))["metadata"]["uid"], obj["kind"]
    create(op, trainer_job(run), namespace, dry=False)
    trainers = wait_until(
        lambda: kube.list("Pod", namespace, f"{names.RUN_LABEL}=qwen,job-name=qwen-trainer"),
        60, "the Job controller's trainer pod",
    )  # fmt: skip
    (trainer,) = trainers
    assert trainer["spec"]["serviceAccountName"] == "qwen-trainer"
    sglang_pods = f"{names.RUN_LABEL}=qwen,{names.COMPONENT_LABEL}=sglang"
    sglang = wait_until(
        lambda: kube.list("Pod", namespace, sglang_pods), 60, "the ReplicaSet controller's pod"
    )
    assert sglang[0]["spec"]["automountServiceAccountToken"] is False
    # Its own pod: labels may change (adoption), the spec may not.
    name = trainer["metadata"]["name"]
    relabel = {"metadata": {"labels": {"adopted": "yes"}}}
    assert refusal(patch, op, "Pod", namespace, name, relabel) == ""
    assert POD_SPEC in refusal(set_image, op, namespace, name, "trainer", "evil:latest")
    assert refusal(delete, op, "Pod", namespace, name) == ""

    # A pool's children of every backend (dry runs: no operator keeps them).
    kube.create(pool_manifest("desks", namespace, 0))
    pool = wait_until(lambda: kube.get("SandboxPool", namespace, "desks"), 30, "the pool")
    uid = pool["metadata"]["uid"]
    cfg = Settings()
    vm_pool = copy.deepcopy(pool)
    vm_pool["spec"]["desktop"] = {"kubevirt": {"containerDisk": "example/ubuntu:22.04"}}
    ext_pool = copy.deepcopy(pool)
    ext_pool["spec"]["desktop"] = {"external": {"endpoints": ["http://10.0.0.5:8000"]}}
    # The pod backend's VM mode (desktop.vm): qemu beside the episode server, the base disk's
    # claim read-only, /dev/kvm as a device resource (or nothing, under qemu's emulator).
    qemu_pools = []
    for vm in ({"volume": "base"}, {"volume": "base", "disk": "Ubuntu.qcow2", "kvm": True}):
        qemu_pools.append(copy.deepcopy(pool))
        qemu_pools[-1]["spec"]["desktop"] = {"pod": {"image": "example/vm-runner:1"}, "vm": vm}
    objs = [
        pool_children.build_token_secret("desks", namespace, uid, "t" * 43),
        pool_children.build_network_policy("desks", namespace, [], OP_NS, [5000]),
        pool_children.build_sandbox_service("desks", namespace, "desks-0", selector=True),
        build_pod(parse_pool(pool), 0, cfg),
        *(build_pod(parse_pool(p), 2 + i, cfg) for i, p in enumerate(qemu_pools)),
        *kubevirt.KubevirtBackend().build(parse_pool(vm_pool), 1, cfg),
        external.build_slice(parse_pool(ext_pool), 0, ready=True),
    ]
    for obj in objs:
        assert refusal(create, op, adopt(obj, pool), namespace) == "", obj["kind"]
    # KubeVirt makes the launcher pod from the VM's template: not the operator's, not labelled so.
    vm = next(o for o in objs if o["kind"] == "VirtualMachine")
    assert "app.kubernetes.io/managed-by" not in vm["spec"]["template"]["metadata"]["labels"]
    assert vm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubecua-operator"


def test_operator_runs_no_privileged_host_or_foreign_workload(cluster, kube, guard, namespace):
    op = acting_as(cluster, OPERATOR)
    run = owned_run(kube, namespace)
    job = trainer_job(run)
    assert refusal(create, op, job, namespace) == ""
    priv = {"securityContext": {"privileged": True}}
    cases: list[tuple[Callable[[Obj], None], str]] = [
        (lambda p: p["containers"][0].update(priv), PRIVILEGED),
        (lambda p: p.update(hostPID=True), HOST_NS),
        (lambda p: p.update(hostNetwork=True), HOST_NS),
        (lambda p: p["volumes"].append({"name": "root", "hostPath": {"path": "/"}}), HOST_PATH),
        (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
         CAPS),
        (lambda p: p["volumes"].append({"name": "db", "secret": {"secretName": "db-password"}}),
         SECRET),
        (lambda p: p["containers"][0].update(envFrom=[{"secretRef": {"name": "db-password"}}]),
         ENV),
        (lambda p: p["volumes"].append({"name": "c", "configMap": {"name": "team-b-config"}}),
         CONFIG_MAP),
        (lambda p: p.update(serviceAccountName="admin"), ACCOUNT),
    ]  # fmt: skip
    for change, rule_text in cases:
        message = refusal(create, op, with_pod(job, change), namespace)
        assert rule_text in message, (rule_text, message)

    # The sglang Deployment: the default ServiceAccount without a token, and nothing else.
    deployment = adopt(run_children.build_sglang(parse(run), Settings())[0], run)
    assert refusal(create, op, deployment, namespace) == ""
    other = with_pod(deployment, lambda p: p.update(serviceAccountName="cluster-admin-sa"))
    assert "not cluster-admin-sa" in refusal(create, op, other, namespace)
    token = with_pod(deployment, lambda p: p.pop("automountServiceAccountToken"))
    assert "not default with a token" in refusal(create, op, token, namespace)

    # A "<x>-trainer" account someone bound to cluster-admin is no trainer's account.
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "ci-trainer", "namespace": namespace}})  # fmt: skip
    cluster.kubectl(
        "create", "clusterrolebinding", f"ci-{namespace}", "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:ci-trainer",
    )  # fmt: skip
    try:
        ci_run = copy.deepcopy(run)
        ci_run["metadata"]["name"] = "ci"  # Job, ServiceAccount and config all named after it
        ci = trainer_job(ci_run)
        assert ci["spec"]["template"]["spec"]["serviceAccountName"] == "ci-trainer"
        message = wait_until(lambda: refusal(create, op, ci, namespace), 30, "the binding")
        # Two policies refuse it (the API server names the first that denied): its rights, and
        # its origin (not an account the operator made for the run: test_admission_edges).
        assert (
            f"serviceAccountName: ci-trainer {POWERFUL}" in message
            or "serviceAccountName: ci-trainer is not an account the kubecua operator made"
            in message
        ), message
    finally:
        cluster.kubectl("delete", "clusterrolebinding", f"ci-{namespace}", check=False)


def test_operator_writes_nothing_in_kube_system(cluster, kube, guard, namespace):
    """The 9 kinds the attack wrote there, plus Secrets and Pods: each refused by the rule."""
    op = acting_as(cluster, OPERATOR)
    run = owned_run(kube, namespace, rollout={"engine": "sglang"}, checkpoint={"volume": "ckpt"})
    pool = pool_manifest("desks", namespace, 1)
    pool["metadata"]["uid"] = "0123456789abcdef"
    ext = pool_manifest("desks", namespace, 1, backend="external",
                        desktop={"external": {"endpoints": ["http://10.0.0.5:8000"]}})  # fmt: skip
    objs = [
        *static_children(parse(run), with_pod_monitor=False),  # ConfigMap, SA, Role, ...
        trainer_job(run),
        external.build_slice(parse_pool(ext), 0, ready=True),
        pool_children.build_token_secret("desks", "kube-system", "0123456789", "t" * 43),
        build_pod(parse_pool(pool), 0, Settings()),
    ]
    kinds = {o["kind"] for o in objs}
    assert kinds >= {"ConfigMap", "Service", "ServiceAccount", "Role", "RoleBinding", "Pod",
                     "NetworkPolicy", "EndpointSlice", "Job", "Deployment", "Secret"}  # fmt: skip
    # A RoleBinding to a missing Role fails RBAC's escalation check before admission: give it
    # one (rules the operator holds) so that the binding reaches the guard.
    role = run_children.build_role(parse(run))
    create(kube, role, "kube-system", dry=False)
    try:
        for obj in objs:
            message = refusal(create, op, obj, "kube-system")
            assert NAMESPACES in message, (obj["kind"], message)
    finally:
        kube.delete("Role", "kube-system", role["metadata"]["name"])
    # Nor a patch or a delete of what is there already.
    relabel = {"metadata": {"labels": dict(names.MANAGED_BY)}}
    assert NAMESPACES in refusal(patch, op, "ServiceAccount", "kube-system", "default", relabel)
    assert NAMESPACES in refusal(patch, op, "ConfigMap", "kube-system", "kube-root-ca.crt", relabel)


def test_operator_patches_and_deletes_only_what_it_owns(cluster, kube, guard, namespace):
    op = acting_as(cluster, OPERATOR)
    wait_default_account(kube, namespace)
    theirs = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": namespace, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    }  # fmt: skip
    kube.create(theirs)
    assert refusal(set_image, kube, namespace, "web", "web", "nginx:1.28") == ""  # a valid patch
    assert OWNED in refusal(set_image, op, namespace, "web", "web", "evil:latest")
    assert OWNED in refusal(
        patch, op, "Pod", namespace, "web", {"metadata": {"labels": {"a": "b"}}}
    )
    assert OWNED in refusal(delete, op, "Pod", namespace, "web")
    assert kube.get("Pod", namespace, "web")["spec"]["containers"][0]["image"] == "nginx:1.27"
    # A name the operator would give, but someone else's object: never overwritten.
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "qwen-config", "namespace": namespace},
                 "data": {"theirs": "yes"}})  # fmt: skip
    overwrite = {"data": {"trainingrun.yaml": "evil"}}
    assert OWNED in refusal(patch, op, "ConfigMap", namespace, "qwen-config", overwrite)
    meta = {"name": "qwen-config", "namespace": namespace}
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **overwrite}
    assert OWNED in refusal(op.apply, applied)  # server-side apply is an UPDATE just the same
    # Its own objects, yes; and of a SandboxPool only the status, never the spec.
    kube.create(pool_manifest("desks", namespace, 1))
    pool = wait_until(lambda: kube.get("SandboxPool", namespace, "desks"), 30, "the pool")
    service = pool_children.build_sandbox_service("desks", namespace, "desks-0", selector=True)
    create(op, adopt(service, pool), namespace, dry=False)
    own = {"metadata": {"labels": {"adopted": "yes"}}}
    assert refusal(patch, op, "Service", namespace, "desks-0", own) == ""
    assert refusal(delete, op, "Service", namespace, "desks-0") == ""
    spec = {"spec": {"replicas": 50}}
    assert "never changes the spec" in refusal(patch, op, "SandboxPool", namespace, "desks", spec)
    finalizers = {"metadata": {"finalizers": None}}  # what kopf patches on an old object
    assert refusal(patch, op, "SandboxPool", namespace, "desks", finalizers) == ""


def test_operator_grants_and_exposes_only_what_a_run_needs(cluster, kube, guard, namespace):
    op = acting_as(cluster, OPERATOR)
    run = owned_run(kube, namespace)
    parsed = parse(run)
    role, binding = run_children.build_role(parsed), run_children.build_role_binding(parsed)
    create(op, adopt(role, run), namespace, dry=False)  # a binding needs its Role to exist
    assert refusal(create, op, binding, namespace) == ""
    # RBAC's escalation check stops a grant the operator does not hold; the guard stops one it
    # holds but a trainer never needs.
    pods = copy.deepcopy(role)
    pods["metadata"]["name"] = "pod-maker"
    pods["rules"].append(rule("", "pods", ["create"]))
    assert "grant only what a trainer needs" in refusal(create, op, pods, namespace)
    to_alice = copy.deepcopy(binding)
    to_alice["subjects"] = [
        {"kind": "User", "name": ALICE, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    assert "binds only a trainer's Role" in refusal(create, op, to_alice, namespace)
    service = run_children.build_metrics_service(parsed)
    node_port = copy.deepcopy(service)
    node_port["spec"]["type"] = "NodePort"
    assert "ClusterIP without external IPs" in refusal(create, op, node_port, namespace)
    anyone = copy.deepcopy(service)
    anyone["spec"]["selector"] = {"app": "web"}
    assert "select only sandboxes or a run's pods" in refusal(create, op, anyone, namespace)
    everything = run_children.build_network_policy(parsed)
    everything["spec"]["podSelector"] = {}
    assert "are <pool>-sandboxes selecting" in refusal(create, op, everything, namespace)
    ext = pool_manifest("desks", namespace, 1, backend="external",
                        desktop={"external": {"endpoints": ["http://10.0.0.5:8000"]}})  # fmt: skip
    hijack = external.build_slice(parse_pool(ext), 0, ready=True)
    hijack["metadata"]["labels"]["kubernetes.io/service-name"] = "kubernetes"
    assert "EndpointSlices of its external sandboxes" in refusal(create, op, hijack, namespace)
    disk = {"kubevirt": {"dataVolume": "golden"}}
    vms = pool_manifest("vms", namespace, 1, backend="kubevirt", desktop=disk)
    vm = kubevirt.build_vm(parse_pool(vms), 0)
    assert refusal(create, op, vm, namespace) == ""
    vm["spec"]["dataVolumeTemplates"][0]["spec"]["source"]["pvc"]["namespace"] = "team-b"
    assert "cloned within their namespace" in refusal(create, op, vm, namespace)


def test_nobody_else_may_claim_the_operators_label(cluster, kube, guard, namespace):
    """The label that makes an object the operator's to change (and its pods guarded)."""
    grant(
        cluster, namespace, ALICE, [rule("", "pods", ["create"]), rule("batch", "jobs", ["create"])]
    )
    alice = acting_as(cluster, ALICE)
    wait_default_account(kube, namespace)
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mine", "labels": dict(names.MANAGED_BY)},
        "spec": {"automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": "busybox",
                                 "securityContext": {"allowPrivilegeEscalation": False}}]},
    }  # fmt: skip
    message = wait_until(lambda: refusal(create, alice, pod, namespace), 30, "the label policy")
    assert LABEL in message
    plain = {**pod, "metadata": {"name": "mine"}}
    assert refusal(create, alice, plain, namespace) == ""
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"metadata": {"labels": dict(names.MANAGED_BY)},
                              "spec": {**plain["spec"], "restartPolicy": "Never"}}},
    }  # fmt: skip
    assert LABEL in refusal(create, alice, job, namespace)
    # A pod that carries the label is guarded whoever makes it (cluster admins included).
    root = copy.deepcopy(pod)
    root["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert PRIVILEGED in refusal(create, kube, root, namespace)


def test_a_run_may_name_only_what_its_author_may_use(cluster, kube, guard, namespace):
    """A user allowed to create TrainingRuns, read the pool `desks` and the task ConfigMap
    `osworld`, and nothing else, reaches no other team's PVC or ConfigMap through a run."""
    grant(cluster, namespace, ALICE, [
        rule("kubecua.dev", "trainingruns", ["create", "update", "patch"]),
        rule("kubecua.dev", "sandboxpools", ["get"], ("desks",)),
        rule("", "configmaps", ["get"], ("osworld",)),
    ])  # fmt: skip
    alice = acting_as(cluster, ALICE)
    ok = run_manifest(namespace)
    wait_until(lambda: refusal(create, alice, ok, namespace) == "", 30, "alice's grants")
    cases = [
        ({"checkpoint": {"volume": "team-b-data"}},
         "spec.checkpoint.volume: PersistentVolumeClaim team-b-data would be mounted read-write"),
        ({"model": {"path": "/models/tiny", "volume": "team-b-models"}},
         "spec.model.volume: PersistentVolumeClaim team-b-models would be mounted"),
        ({"tasks": {"configMapRef": "team-b-tasks"}},
         "spec.tasks.configMapRef: ConfigMap team-b-tasks would be read by the trainer"),
        ({"evaluation": {"tasks": {"configMapRef": "team-b-tasks"}}},
         "spec.evaluation.tasks.configMapRef: ConfigMap team-b-tasks"),
        ({"sandboxes": {"poolRef": "team-b-desks", "minReady": 1}},
         "spec.sandboxes.poolRef: SandboxPool team-b-desks"),
        ({"sandboxes": {"poolRef": "desks", "tokenSecretRef": "team-b-sandbox-token"}},
         "spec.sandboxes.tokenSecretRef: Secret team-b-sandbox-token"),
    ]  # fmt: skip
    for spec, message in cases:
        got = refusal(create, alice, run_manifest(namespace, **spec), namespace, False)
        assert message in got, (spec, got)
        assert "you may not" in got
    assert kube.get("TrainingRun", namespace, "qwen") is None  # nothing was created
    # With the rights herself, the same references are hers to name.
    grant(cluster, namespace, ALICE, [
        rule("", "persistentvolumeclaims", ["get", "update"], ("team-b-data",)),
    ])  # fmt: skip
    mine = run_manifest(namespace, checkpoint={"volume": "team-b-data"})
    wait_until(lambda: refusal(create, alice, mine, namespace) == "", 30, "the PVC grant")
    # A change that names nothing new (labels, kopf's finalizers) needs no rights at all.
    kube.create(run_manifest(namespace, tasks={"configMapRef": "team-b-tasks"}))
    op = acting_as(cluster, OPERATOR)
    labels = {"metadata": {"labels": {"team": "a"}}}
    assert refusal(patch, alice, "TrainingRun", namespace, "qwen", labels) == ""
    assert (
        refusal(patch, op, "TrainingRun", namespace, "qwen", {"metadata": {"finalizers": None}})
        == ""
    )
    steps = {"spec": {"steps": 5}}  # ...but a spec change is the author's, references and all
    assert "spec.tasks.configMapRef" in refusal(
        patch, alice, "TrainingRun", namespace, "qwen", steps
    )


def test_a_kubevirt_pool_clones_only_a_disk_its_author_may_read(cluster, guard, namespace):
    grant(cluster, namespace, ALICE, [rule("kubecua.dev", "sandboxpools", ["create"])])
    alice = acting_as(cluster, ALICE)
    pool = pool_manifest("vms", namespace, 1, backend="kubevirt",
                         desktop={"kubevirt": {"dataVolume": "team-b-disk"}})  # fmt: skip
    message = wait_until(lambda: refusal(create, alice, pool, namespace), 30, "the policy")
    assert "spec.desktop.kubevirt.dataVolume: PersistentVolumeClaim team-b-disk" in message
