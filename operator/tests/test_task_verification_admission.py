"""TaskVerification under the chart's RBAC and admission policies, on the real API server: the
operator, with only its chart's grants, makes the verifier's account, Role and Job, and the Job
controller's verifier pod passes the workloads and identities policies; a user who may not get
the pool cannot name it (the references policy: the verifier would use the pool's token). A
TrainingRun's trainer pod mounts the manifest ConfigMap it names (spec.tasks.verified.configMapRef)
under the workloads policy, and only an author who may read that ConfigMap may name it.
"""

from __future__ import annotations

import re

import yaml

from . import test_security
from .conftest import wait_until
from .helpers import live, pool_manifest, wait_pool
from .test_security import SA, grant_user
from .test_task_verification import manifest, tv_status
from .test_trainingrun_lifecycle import OFF_NODES, run_manifest

# test_security's fixtures: the chart's account, RBAC and policies; the operator as that account.
chart_rbac = test_security.chart_rbac
operator_as_its_account = test_security.operator_as_its_account


def test_the_operator_runs_a_verification_on_the_charts_grants_and_policies(
    cluster, kube, operator_as_its_account, namespace
):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    kube.create(manifest(namespace))
    wait_until(lambda: kube.get("Job", namespace, "ck-verifier"), 60, "the verifier Job")
    selector = "batch.kubernetes.io/job-name=ck-verifier"
    wait_until(lambda: live(kube.list("Pod", namespace, selector)), 60, "the verifier pod")
    wait_until(lambda: tv_status(kube, namespace).get("phase") == "Running", 60, "Running")
    log = operator_as_its_account.log_path.read_text()
    denied = re.findall(rf'{SA.rsplit(":", 1)[1]}\\*"? cannot [a-z]+ resource [^ ]+', log)
    assert denied == []
    assert re.findall(r"ValidatingAdmissionPolicy '[^']+'", log) == []


def test_only_a_user_who_may_get_the_pool_may_verify_on_it(cluster, kube, chart_rbac, namespace):
    def refused(who: str) -> str:
        proc = cluster.kubectl(
            "create", "--dry-run=server", f"--as={who}", "-f", "-",
            input=yaml.safe_dump(manifest(namespace)), check=False,
        )  # fmt: skip
        return str(proc.stderr) if proc.returncode else ""

    grant_user(cluster, namespace, "alice@example.com", ["taskverifications"], ["create"])
    message = wait_until(lambda: refused("alice@example.com"), 30, "the policy to be active")
    assert "spec.poolRef: SandboxPool desks would give the verifier its sandboxes and token" in (
        message
    )
    grant_user(
        cluster, namespace, "bob@example.com", ["taskverifications", "sandboxpools"],
        ["create", "get"],
    )  # fmt: skip
    wait_until(lambda: not refused("bob@example.com"), 30, "bob's pool read to count")


def test_a_trainer_mounts_a_manifest_config_map_under_the_policies(
    cluster, kube, operator_as_its_account, namespace
):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2)
    verified = {"manifest": "/verified/verified.json", "configMapRef": "ck-manifest"}
    run = run_manifest(
        namespace, tasks={"configMapRef": "osworld", "verified": verified}, trainer=OFF_NODES
    )
    kube.create(run)
    selector = "kubecua.dev/trainingrun=qwen,app.kubernetes.io/component=trainer"
    (pod,) = wait_until(lambda: live(kube.list("Pod", namespace, selector)), 60, "trainer pod")
    names = [v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v]
    assert sorted(names) == ["ck-manifest", "qwen-config"]
    log = operator_as_its_account.log_path.read_text()
    assert re.findall(r"ValidatingAdmissionPolicy '[^']+'", log) == []


def test_only_a_user_who_may_read_the_manifest_config_map_may_name_it(
    cluster, kube, chart_rbac, namespace
):
    verified = {"manifest": "/verified/verified.json", "configMapRef": "ck-manifest"}
    run = run_manifest(namespace, tasks={"path": "/tasks", "verified": verified})

    def refused(who: str) -> str:
        proc = cluster.kubectl(
            "create", "--dry-run=server", f"--as={who}", "-f", "-",
            input=yaml.safe_dump(run), check=False,
        )  # fmt: skip
        return str(proc.stderr) if proc.returncode else ""

    carol = "carol@example.com"
    grant_user(cluster, namespace, carol, ["trainingruns", "sandboxpools"], ["create", "get"])
    message = wait_until(lambda: refused(carol), 30, "the policy to be active")
    assert "spec.tasks.verified.configMapRef: ConfigMap ck-manifest would be mounted" in message
