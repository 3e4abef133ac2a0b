"""Golden checks of a TrainingRun's children: the Indexed Job, RBAC and the sglang engine."""

from __future__ import annotations

import yaml

from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun import children
from kubecua_operator.trainingrun.job import build_job
from kubecua_operator.trainingrun.model import parse

BODY = {
    "apiVersion": "kubecua.dev/v1alpha1",
    "kind": "TrainingRun",
    "metadata": {"name": "qwen", "namespace": "ns1", "uid": "u-2", "generation": 1},
    "spec": {
        "model": {"path": "/models/qwen/Qwen2.5-VL-3B", "volume": "models"},
        "sandboxes": {"poolRef": "desks", "minReady": 2},
        "tasks": {"configMapRef": "osworld-train"},
        "rollout": {"engine": "sglang", "replicas": 2, "gpusPerReplica": 1},
        "trainer": {"nodes": 2, "gpusPerNode": 4, "resources": {"requests": {"cpu": "8"}}},
        "checkpoint": {"volume": "ckpt", "path": "/ckpt"},
        "steps": 100,
        "backoffLimit": 2,
        "kueue": {"queueName": "gpu"},
        "metrics": {"port": 9400},
    },
}
RUN = parse(BODY)  # as the operator sees it: its spec parsed once


def test_trainer_is_an_indexed_job_with_torchrun_environment():
    job = build_job(RUN, Settings(), suspend=False)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 2
    assert spec["suspend"] is False
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "qwen-trainer"
    assert pod["serviceAccountName"] == "qwen-trainer"
    c = pod["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["PET_NNODES"] == "2"
    assert env["PET_NPROC_PER_NODE"] == "4"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "qwen-trainer-0.qwen-trainer"
    assert "job-completion-index" in env["PET_NODE_RANK"]["fieldRef"]["fieldPath"]
    assert env["KUBECUA_SGLANG_URLS"] == "http://qwen-sglang:30000"
    assert c["resources"] == {"requests": {"cpu": "8"}, "limits": {"nvidia.com/gpu": 4}}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["model"] == "/models/qwen"
    assert mounts["checkpoints"] == "/ckpt"
    labels = spec["template"]["metadata"]["labels"]
    assert labels["kubecua.dev/client-of-desks"] == "true"


def test_trainer_job_ignores_checkpointed_stops_and_disruptions_and_counts_other_failures():
    spec = build_job(RUN, Settings(), suspend=False)["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"  # the API requires it
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "Ignore",
         "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
    ]  # fmt: skip
    assert spec["template"]["spec"]["containers"][0]["name"] == "trainer"


def test_role_grants_discovery_and_own_status_only_and_no_secret():
    rules = children.build_role(RUN)["rules"]
    by_resource = {tuple(r["resources"]): r for r in rules}
    assert by_resource[("endpointslices",)]["verbs"] == ["list", "watch"]
    assert by_resource[("services",)]["verbs"] == ["get", "list"]  # tells own Services (issue 42)
    assert ("secrets",) not in by_resource  # the token is a mounted file
    assert by_resource[("trainingruns/status",)] == {
        "apiGroups": ["kubecua.dev"],
        "resources": ["trainingruns/status"],
        "resourceNames": ["qwen"],
        "verbs": ["get", "patch"],
    }
    assert set(by_resource[("configmaps",)]["resourceNames"]) == {"qwen-config", "osworld-train"}


def test_trainer_mounts_the_bound_pools_token_and_nothing_by_guess():
    # The name comes from the pool's index entry (test_pool_spec_parse.py checks it per backend).
    def secret(job: dict) -> list[str]:
        vols = job["spec"]["template"]["spec"]["volumes"]
        return [v["secret"]["secretName"] for v in vols if "secret" in v]

    assert secret(build_job(RUN, Settings(), False, "desks-sandbox-token-0f1e2d3caa")) == [
        "desks-sandbox-token-0f1e2d3caa"
    ]
    assert secret(build_job(RUN, Settings(), False, None)) == []  # the pool not seen yet
    own = parse({**BODY, "spec": {**BODY["spec"], "sandboxes": {
        "poolRef": "desks", "tokenSecretRef": "mine-sandbox-token"}}})  # fmt: skip
    assert secret(build_job(own, Settings(), False, "desks-sandbox-token")) == [
        "mine-sandbox-token"
    ]


def test_run_network_policy_admits_only_the_runs_own_pods_and_the_metrics_port():
    np = children.build_network_policy(RUN)
    assert np["metadata"]["name"] == "qwen-run"
    spec = np["spec"]
    assert spec["podSelector"] == {"matchLabels": {"kubecua.dev/trainingrun": "qwen"}}
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"kubecua.dev/trainingrun": "qwen"}}}]},
        {"ports": [{"protocol": "TCP", "port": 9400}]},
    ]


def test_config_map_holds_a_loadable_manifest():
    cm = children.build_config_map(RUN)
    manifest = yaml.safe_load(cm["data"]["trainingrun.yaml"])
    assert manifest["kind"] == "TrainingRun"
    assert manifest["spec"] == BODY["spec"]


def test_sglang_deployment_serves_the_model_on_gpus():
    deployment, service = children.build_sglang(RUN, Settings())
    assert deployment["spec"]["replicas"] == 2
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][:2] == ["--model-path", "/models/qwen/Qwen2.5-VL-3B"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert service["spec"]["ports"][0]["port"] == 30000
