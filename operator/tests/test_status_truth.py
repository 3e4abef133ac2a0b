"""Specs the schema accepts but no cluster can run get a true status (issue 13, finding 8): a
Degraded condition with a reason and the API server's own message, and one Event per distinct
problem rather than one per pass. (What a rule can say is refused at admission instead: see
test_crd_validation.)
"""

from __future__ import annotations

from .conftest import REPO, wait_until
from .helpers import condition, pool_manifest, pool_status, set_pod_status, wait_pool
from .test_pool_kubevirt_backend import kubevirt_pool
from .test_trainingrun_lifecycle import run_manifest

VM_CRD = "crd/virtualmachines.kubevirt.io"


def degraded(kube, namespace: str, pool: str, reason: str) -> dict:
    def check() -> dict | None:
        cond = condition(pool_status(kube, namespace, pool), "Degraded")
        return cond if cond.get("status") == "True" and cond.get("reason") == reason else None

    return wait_until(check, 60, f"Degraded/{reason}")


def events(kube, namespace: str, pool: str, reason: str) -> list[dict]:
    return [
        e
        for e in kube.list("Event", namespace)
        if e["involvedObject"]["name"] == pool and e["reason"] == reason
    ]


def test_sandboxes_the_api_refuses_make_the_pool_degraded_without_false_events(
    kube, operator, namespace
):
    # Admission of the pool cannot see this: the namespace's LimitRange refuses each sandbox pod.
    # (A nodeSelector key the Pod API rejects was the example here until the CRD refused it too.)
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "small"},
              "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}  # fmt: skip
    kube.request("POST", f"/api/v1/namespaces/{namespace}/limitranges", limits)
    bad = {"pod": {"resources": {"limits": {"cpu": "2"}}}}
    kube.create(pool_manifest("desks", namespace, 2, desktop=bad))
    cond = degraded(kube, namespace, "desks", "SandboxesRefused")
    assert "maximum cpu usage per Container is 1, but limit is 2" in cond["message"]
    assert kube.list("Pod", namespace, "kubecua.dev/pool=desks") == []
    reconciles = operator.reconciles("SandboxPool")
    wait_until(lambda: operator.reconciles("SandboxPool") >= reconciles + 3, 30, "3 more passes")
    assert events(kube, namespace, "desks", "SandboxesCreated") == []
    assert len(events(kube, namespace, "desks", "SandboxesRefused")) == 1  # rate-limited


def test_image_that_cannot_be_pulled_degrades_the_pool_and_is_replaced(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    pod = kube.get("Pod", namespace, "desks-0")
    waiting = {"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}
    set_pod_status(kube, namespace, "desks-0", {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "sandbox", "ready": False, "restartCount": 0,
                               "image": "x", "imageID": "", "state": waiting}],
    })  # fmt: skip
    cond = degraded(kube, namespace, "desks", "SandboxesFailed")
    assert cond["message"] == "1 sandboxes failed (ErrImagePull: 1)"
    uid = pod["metadata"]["uid"]
    wait_until(
        lambda: (p := kube.get("Pod", namespace, "desks-0")) and p["metadata"]["uid"] != uid,
        60,
        "the stuck sandbox replaced",
    )


def test_kubevirt_pool_without_kubevirt_says_so(cluster, kube, operator, namespace):
    cluster.kubectl("delete", VM_CRD, "--timeout=60s")
    try:
        kube.create(kubevirt_pool(namespace, 1))
        cond = degraded(kube, namespace, "vms", "KubeVirtNotInstalled")
        assert "kubevirt.io/v1 virtualmachines" in cond["message"]
        assert condition(pool_status(kube, namespace, "vms"), "Ready")["status"] == "False"
    finally:
        data = REPO / "operator" / "tests" / "data" / "kubevirt-crds.yaml"
        cluster.kubectl("apply", "-f", str(data))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", VM_CRD)


def test_run_whose_trainer_cannot_be_scheduled_is_pending_with_the_schedulers_reason(
    kube, operator, namespace
):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    kube.create(run_manifest(namespace, checkpoint={"volume": "no-such-pvc"}))

    def blocked() -> dict | None:
        st = (kube.get("TrainingRun", namespace, "qwen") or {}).get("status") or {}
        cond = condition(st, "Progressing")
        return st if cond.get("reason") == "TrainerUnschedulable" else None

    st = wait_until(blocked, 90, "TrainerUnschedulable")
    assert st["phase"] == "Pending"
    assert (
        'persistentvolumeclaim "no-such-pvc" not found' in condition(st, "Progressing")["message"]
    )
