"""TaskVerification on the real control plane (kwok nodes, no kubelet), with the operator running:
the verifier Job's command, account, environment, token and owner; its Role asked of the API
server's authorizer (least privilege); the status following the Job to Succeeded (counts from the
manifest in the ConfigMap) and to Failed (the Job's reason and the verifier's last words); specs
the API server refuses, naming the field; deleting the object deletes the Job.

kwok nodes run no containers: the verifier pod asks for more CPU than any node has, so kwok
leaves it Pending, and the test writes its status through the status subresource as a kubelet
would (the real Job controller then completes or fails the Job), and writes the manifest into the
ConfigMap as the verifier would.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubecua_api.taskmanifest import VerifiedManifest
from kubecua_operator.k8s import Kube

from .conftest import REPO, wait_until
from .helpers import condition, live, pool_manifest, set_pod_status, wait_pool
from .test_trainingrun_lifecycle import run_manifest

Obj = dict[str, Any]
OFF_NODES = {"requests": {"cpu": "100k"}}  # no kwok node fits: the pod stays Pending


@pytest.fixture(scope="module")
def verification_crd(cluster: Any, crds: None) -> None:
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/taskverifications.kubecua.dev",
    )  # fmt: skip


def manifest(namespace: str, name: str = "ck", **spec: Any) -> Obj:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TaskVerification",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "poolRef": "desks",
            "tasks": {"path": "/opt/kubecua/tasks/colourkeys/train"},
            "resources": OFF_NODES,
            **spec,
        },
    }


def tv_status(kube: Kube, namespace: str, name: str = "ck") -> Obj:
    return (kube.get("TaskVerification", namespace, name) or {}).get("status") or {}


def wait_phase(kube: Kube, namespace: str, phase: str, timeout: float = 60) -> Obj:
    return wait_until(
        lambda: (st := tv_status(kube, namespace)).get("phase") == phase and st,
        timeout,
        f"phase {phase}",
    )


def start(kube: Kube, namespace: str, **spec: Any) -> tuple[Obj, Obj]:
    """A ready pool and a TaskVerification of it; its Job and its (Pending) pod."""
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    kube.create(manifest(namespace, **spec))
    job = wait_until(lambda: kube.get("Job", namespace, "ck-verifier"), 60, "the verifier Job")
    pod = wait_until(
        lambda: live(kube.list("Pod", namespace, "batch.kubernetes.io/job-name=ck-verifier")),
        60,
        "the verifier pod",
    )[0]
    return job, pod


def test_pending_without_the_pool_and_no_job(kube, verification_crd, operator, namespace):
    kube.create(manifest(namespace, poolRef="nope"))
    st = wait_phase(kube, namespace, "Pending")
    assert condition(st, "SandboxesReady")["reason"] == "PoolNotFound"
    assert kube.get("Job", namespace, "ck-verifier") is None


def test_the_job_runs_verify_on_the_pool_as_its_own_account(
    kube, verification_crd, operator, namespace
):
    job, pod = start(kube, namespace, repeats=3, parallelism=4, accessibilityTree=True)
    tv = kube.get("TaskVerification", namespace, "ck") or {}
    uid = tv["metadata"]["uid"]
    owner = job["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"], o.get("controller")) for o in owner] == [
        ("TaskVerification", uid, True)
    ]
    spec = job["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == "localhost/kubecua/tasks:dev"  # the operator's default
    assert container["command"] == [
        "python", "-m", "kubecua_tasks.verify_job", "--config-map", "ck-manifest",
        "--namespace", namespace, "--",
        "tasks", "verify", "/opt/kubecua/tasks/colourkeys/train", "--pool", "desks",
        "--namespace", namespace, "--token-file", "/var/run/kubecua/sandbox-token/token",
        "--repeats", "3", "--manifest", "/tmp/verified.json", "--max-sandboxes", "4", "--a11y",
    ]  # fmt: skip
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
    }
    assert container["resources"] == OFF_NODES
    assert spec["serviceAccountName"] == "ck-verifier"
    # The pool's own token Secret (its name carries the pool's uid), mounted read-only.
    pool_uid = (kube.get("SandboxPool", namespace, "desks") or {})["metadata"]["uid"]
    secrets = [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v]
    assert secrets == [f"desks-sandbox-token-{pool_uid.replace('-', '')[:10]}"]
    labels = pod["metadata"]["labels"]
    assert labels["kubecua.dev/client-of-desks"] == "true"  # the pool's NetworkPolicy admits it
    assert pod["metadata"]["annotations"]["kubecua.dev/taskverification-uid"] == uid
    cm = kube.get("ConfigMap", namespace, "ck-manifest") or {}
    assert cm["metadata"]["ownerReferences"][0]["uid"] == uid
    st = wait_phase(kube, namespace, "Running")
    assert st["job"] == "ck-verifier"
    assert condition(st, "SandboxesReady")["status"] == "True"


def can_i(cluster: Any, namespace: str, *what: str) -> bool:
    sa = f"system:serviceaccount:{namespace}:ck-verifier"
    proc = cluster.kubectl("auth", "can-i", *what, "-n", namespace, f"--as={sa}", check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def test_the_verifier_may_discover_its_pool_and_write_its_manifest_only(
    cluster, kube, verification_crd, operator, namespace
):
    kube.create(manifest(namespace))  # no pool: the account and grants come first all the same
    wait_until(lambda: kube.get("RoleBinding", namespace, "ck-verifier"), 60, "the RoleBinding")
    own = ("patch", "configmap/ck-manifest")
    wait_until(lambda: can_i(cluster, namespace, *own), 30, "the authorizer to see the Role")
    yes = [
        ("get", "sandboxpools.kubecua.dev/desks"),  # the pool's uid: whose Services to trust
        ("list", "services"),
        ("get", "services"),
        ("list", "endpointslices.discovery.k8s.io"),
        ("watch", "endpointslices.discovery.k8s.io"),
        ("get", "configmap/ck-manifest"),
        ("patch", "configmap/ck-manifest"),
    ]
    no = [
        ("get", "sandboxpools.kubecua.dev/other"),
        ("list", "sandboxpools.kubecua.dev"),
        ("patch", "sandboxpools.kubecua.dev/desks"),
        ("get", "secrets"),
        ("get", "secret/desks-sandbox-token"),
        ("list", "secrets"),
        ("get", "configmap/other"),
        ("patch", "configmap/other"),
        ("create", "configmaps"),
        ("delete", "configmap/ck-manifest"),
        ("patch", "taskverifications.kubecua.dev/ck", "--subresource=status"),
        ("get", "taskverifications.kubecua.dev/ck"),
        ("patch", "trainingruns.kubecua.dev/x", "--subresource=status"),
        ("create", "pods"),
        ("watch", "services"),
        ("get", "endpointslices.discovery.k8s.io"),
    ]
    assert [w for w in yes if not can_i(cluster, namespace, *w)] == []
    assert [w for w in no if can_i(cluster, namespace, *w)] == []


def verified_manifest(tasks: list[tuple[str, str, bool]]) -> str:
    """A manifest of `tasks` (id, verdict, reproducible start), as verify writes one."""
    records = []
    for tid, verdict, same in tasks:
        records.append({
            "id": tid, "path": f"{tid}.json", "digest": "sha256:0", "verdict": verdict,
            "reproducible_start": same, "scores": {"reference": [1.0, 1.0]}, "seconds": 2.0,
            "episodes": [],
        })  # fmt: skip
    summary: dict[str, int] = {}
    for _, verdict, _ in tasks:
        summary[verdict] = summary.get(verdict, 0) + 1
    summary["unreproducible-start"] = sum(not same for _, _, same in tasks)
    summary["usable"] = sum(v == "verified" and same for _, v, same in tasks)
    body = {
        "created": "2026-11-29T10:00:00Z", "folder": "/opt/kubecua/tasks/colourkeys/train",
        "content_hash": "sha256:1", "sandboxes": ["http://10.0.0.1:8000", "http://10.0.0.2:8000"],
        "repeats": 2, "seconds": 61.25, "summary": summary, "tasks": records,
    }  # fmt: skip
    return VerifiedManifest.model_validate(body).model_dump_json()


def test_status_follows_the_job_to_succeeded_with_the_manifest_counts(
    kube, verification_crd, operator, namespace
):
    _, pod = start(kube, namespace)
    wait_phase(kube, namespace, "Running")
    text = verified_manifest([("a", "verified", True), ("b", "verified", False),
                              ("c", "flaky", True)])  # fmt: skip
    kube.patch("ConfigMap", namespace, "ck-manifest", {"data": {"verified.json": text}})
    # What the kubelet would write when the verifier exits 0; the Job controller completes it.
    set_pod_status(kube, namespace, pod["metadata"]["name"], exited(0))
    st = wait_phase(kube, namespace, "Succeeded")
    assert st["manifest"] == {"configMap": "ck-manifest", "key": "verified.json"}
    assert (st["tasks"], st["usable"], st["unreproducibleStarts"]) == (3, 1, 1)
    assert st["verdicts"] == {"flaky": 1, "verified": 2}
    assert (st["sandboxes"], st["seconds"]) == (2, 61.2)
    assert condition(st, "Complete")["status"] == "True"
    assert condition(st, "Failed")["status"] == "False"
    assert st["completionTime"]
    assert st["startTime"]
    assert (
        json.loads(
            (kube.get("ConfigMap", namespace, "ck-manifest") or {})["data"]["verified.json"]
        )["tasks"][0]["id"]
        == "a"
    )


def exited(code: int, message: str = "") -> Obj:
    """A finished pod's status as a kubelet writes it when the verifier exits `code`."""
    state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                            "message": message}}  # fmt: skip
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "containerStatuses": [{
            "name": "verifier", "ready": False, "restartCount": 0, "image": "tasks",
            "imageID": "", "state": state,
        }],
    }  # fmt: skip


def test_a_failed_job_fails_the_verification_saying_why(
    kube, verification_crd, operator, namespace
):
    _, pod = start(kube, namespace, backoffLimit=0)
    words = "kubecua: --pool desks: no ready sandboxes in namespace x"
    set_pod_status(kube, namespace, pod["metadata"]["name"], exited(2, words))
    st = wait_phase(kube, namespace, "Failed")
    failed = condition(st, "Failed")
    assert failed["status"] == "True"
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "Job ck-verifier failed" in failed["message"]
    assert f"exit 2: {words}" in failed["message"]
    assert "manifest" not in st
    events = wait_until(
        lambda: [e for e in kube.list("Event", namespace) if e["reason"] == "Failed"], 30, "Event"
    )
    assert events[0]["involvedObject"]["kind"] == "TaskVerification"


def test_a_job_that_completes_without_a_manifest_fails_naming_the_config_map(
    kube, verification_crd, operator, namespace
):
    _, pod = start(kube, namespace)
    set_pod_status(kube, namespace, pod["metadata"]["name"], exited(0))
    failed = condition(wait_phase(kube, namespace, "Failed"), "Failed")
    assert failed["reason"] == "ManifestMissing"
    assert "ConfigMap ck-manifest holds no verified.json" in failed["message"]


BAD = [
    ({"repeats": 1}, "spec.repeats"),
    ({"tasks": {"path": "colourkeys/train"}}, "spec.tasks.path"),
    ({"poolRef": "Not_A_Name"}, "spec.poolRef"),
    ({"timeoutSeconds": 5}, "spec.timeoutSeconds"),
    ({"parallelism": 0}, "spec.parallelism"),
    ({"resources": {"limits": {"cpu": "-1"}}}, "spec.resources.limits.cpu"),
    ({"image": "UPPER CASE"}, "spec.image"),
    ({"parallel": 3}, 'unknown field "spec.parallel"'),
]


@pytest.mark.parametrize(("spec", "field"), BAD, ids=[b[1] for b in BAD])
def test_the_api_server_refuses_a_bad_spec_naming_the_field(
    cluster, verification_crd, namespace, spec, field
):
    doc = json.dumps(manifest(namespace, **spec))
    proc = cluster.kubectl("apply", "--validate=strict", "-f", "-", input=doc, check=False)
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr


def test_the_spec_is_immutable_and_the_name_a_short_label(
    cluster, kube, verification_crd, namespace
):
    kube.create(manifest(namespace, poolRef="nope"))
    patch = json.dumps({"spec": {"repeats": 4}})
    proc = cluster.kubectl(
        "patch", "taskverification", "ck", "-n", namespace, "--type=merge", "-p", patch,
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "spec is immutable" in proc.stderr, proc.stderr
    long = json.dumps(manifest(namespace, name="v" * 51))
    proc = cluster.kubectl("apply", "-f", "-", input=long, check=False)
    assert proc.returncode != 0
    assert "metadata.name" in proc.stderr, proc.stderr


def test_deleting_the_verification_deletes_its_job(kube, verification_crd, operator, namespace):
    job, _ = start(kube, namespace)
    kube.delete("TaskVerification", namespace, "ck")
    children = (("Job", "ck-verifier"), ("ConfigMap", "ck-manifest"), ("Role", "ck-verifier"))

    def gone() -> bool:
        return all(kube.get(kind, namespace, name) is None for kind, name in children)

    wait_until(gone, 60, "the Job, ConfigMap and Role garbage-collected")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "TaskVerification"


def test_the_example_is_accepted_as_it_is(cluster, verification_crd, namespace):
    example = REPO / "examples" / "taskverification.yaml"
    proc = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", str(example),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


VERIFIED = {"manifest": "/verified/verified.json", "configMapRef": "ck-manifest"}


def test_a_run_mounts_the_manifest_of_a_verification_as_its_file(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    tasks = {"configMapRef": "osworld", "verified": VERIFIED}
    kube.create(run_manifest(namespace, tasks=tasks))
    job = wait_until(lambda: kube.get("Job", namespace, "qwen-trainer"), 60, "the trainer Job")
    spec = job["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "verified-tasks"]
    assert volume["configMap"]["name"] == "ck-manifest"
    assert volume["configMap"]["items"] == [{"key": "verified.json", "path": "verified.json"}]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "verified-tasks"]
    assert (mount["mountPath"], mount["subPath"], mount["readOnly"]) == (
        "/verified/verified.json",
        "verified.json",
        True,
    )


@pytest.mark.parametrize("path", ["/etc/kubecua/verified.json", "verified.json", "/dev/x", "/v/"])
def test_a_manifest_mounted_onto_the_trainers_own_mounts_is_refused(
    cluster, verification_crd, namespace, path
):
    tasks = {"configMapRef": "osworld", "verified": {**VERIFIED, "manifest": path}}
    doc = json.dumps(run_manifest(namespace, tasks=tasks))
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=doc, check=False)
    assert proc.returncode != 0
    assert "spec.tasks.verified.manifest: with configMapRef" in proc.stderr, proc.stderr
