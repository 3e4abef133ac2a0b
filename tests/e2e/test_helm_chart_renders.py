"""The kubecua chart lints clean and renders what a platform engineer relies on: CRDs identical to
crds/, one leader-safe operator with a locked-down pod, least-privilege RBAC in either scope, and
opt-in monitoring objects carrying the labels and annotations their selectors need.
No cluster: `helm lint` and `helm template` only."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from kubecua_testkit.tools import REPO, binary, run

CHART = REPO / "charts" / "kubecua"
ALL_ON = ",".join(
    f"{k}.enabled=true" for k in ("serviceMonitor", "podMonitor", "prometheusRule", "dashboards")
)


def render(*sets: str, namespace: str = "kubecua-system") -> list[dict]:
    args: list[str | os.PathLike[str]] = [
        binary("helm"),
        "template",
        "kubecua",
        CHART,
        "-n",
        namespace,
    ]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run(args).stdout) if d]


def one(docs: list[dict], kind: str, name: str = "") -> dict:
    found = [d for d in docs if d["kind"] == kind and (not name or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {[d['metadata']['name'] for d in found]}"
    return found[0]


@pytest.mark.parametrize("sets", [[], [ALL_ON], ["rbac.scope=namespace"]])
def test_helm_lint_is_clean_in_strict_mode(sets):
    args: list[str | os.PathLike[str]] = [binary("helm"), "lint", "--strict", CHART]
    args += [a for s in sets for a in ("--set", s)]
    out = run(args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out
    assert "[ERROR]" not in out


def test_chart_crds_are_a_byte_identical_copy_of_crds_dir():
    shipped = {p.name: p.read_bytes() for p in (CHART / "files" / "crds").glob("*.yaml")}
    source = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    assert shipped == source, "charts/kubecua/files/crds drifted from crds/: run `make crds`"


def test_rendered_crds_equal_the_source_apart_from_the_keep_policy():
    docs = render()
    for path in sorted((REPO / "crds").glob("*.yaml")):
        source = yaml.safe_load(path.read_text())
        crd = one(docs, "CustomResourceDefinition", source["metadata"]["name"])
        assert crd["spec"] == source["spec"]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    dropped = render("crds.keep=false")
    assert all(
        "helm.sh/resource-policy" not in d["metadata"].get("annotations", {})
        for d in dropped
        if d["kind"] == "CustomResourceDefinition"
    )
    assert not [d for d in render("crds.install=false") if d["kind"] == "CustomResourceDefinition"]


def test_operator_is_one_recreated_non_root_pod_with_probes():
    dep = one(render(), "Deployment", "kubecua-operator")
    spec, pod = dep["spec"], dep["spec"]["template"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert "--liveness=http://0.0.0.0:8081/healthz" in c["args"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["KUBECUA_OPERATOR_METRICS_PORT"] == "8080"
    assert env["KUBECUA_OPERATOR_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["KUBECUA_OPERATOR_TOKEN_KEY_FILE"] == "/var/run/kubecua/token-key/key"
    key = one(render(), "Secret", "kubecua-operator-token-key")
    assert len(key["data"]["key"]) >= 64  # base64 of 64 random characters
    assert env["KUBECUA_OPERATOR_SANDBOX_IMAGE"] == "localhost/kubecua/sandbox:dev"
    assert pod["serviceAccountName"] == "kubecua-operator"


def test_extra_env_becomes_operator_settings():
    dep = one(render("operator.extraEnv.pollSeconds=5"), "Deployment")
    containers = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert env["KUBECUA_OPERATOR_POLL_SECONDS"] == "5"


def test_cluster_scope_grants_no_wildcards_and_never_lists_secrets():
    docs = render()
    role = one(docs, "ClusterRole", "kubecua-operator")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
        if "secrets" in rule["resources"]:
            assert rule["verbs"] == ["create"]  # never read; tokens are derived
    binding = one(docs, "ClusterRoleBinding", "kubecua-operator")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kubecua-operator", "namespace": "kubecua-system"}
    ]
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]


def test_admission_policies_guard_references_the_operators_writes_and_its_label():
    docs = render()
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    names = ["references", "guard", "workloads", "owner-label", "endpoints", "identities"]
    # placement (issue 42) unless sandboxes.allowControlPlane: pools stay off the control plane.
    assert set(policies) == {f"kubecua-operator-{n}" for n in [*names, "placement"]}
    operator = '"system:serviceaccount:kubecua-system:kubecua-operator"'
    guard = policies["kubecua-operator-guard"]["spec"]
    assert guard["matchConditions"][0]["expression"] == f"request.userInfo.username == {operator}"
    # Every write of the operator's account, whatever the kind.
    (every,) = guard["matchConstraints"]["resourceRules"]
    assert (every["apiGroups"], every["resources"]) == (["*"], ["*/*"])
    assert every["operations"] == ["CREATE", "UPDATE", "DELETE"]
    where = guard["validations"][0]["expression"]
    assert "'kube-system'" in where
    # The workloads policy also takes what carries the operator's label, whoever writes it.
    workloads = policies["kubecua-operator-workloads"]["spec"]
    match = workloads["matchConditions"][0]["expression"]
    assert operator in match
    assert "'app.kubernetes.io/managed-by'" in match
    resources = {
        r for rule in workloads["matchConstraints"]["resourceRules"] for r in rule["resources"]
    }
    assert resources == {"pods", "jobs", "deployments", "replicasets"}
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings} == set(policies)
    # Two read the objects a write would reach as parameters: every Service (an EndpointSlice's)
    # and every ServiceAccount (a trainer pod's) of the request's namespace.
    params = {b["spec"]["policyName"]: b["spec"].get("paramRef") for b in bindings}
    assert params["kubecua-operator-endpoints"]["selector"] == {}
    assert params["kubecua-operator-identities"]["selector"] == {}
    kinds = {n: p["spec"].get("paramKind", {}).get("kind") for n, p in policies.items()}
    assert kinds["kubecua-operator-endpoints"] == "Service"
    assert kinds["kubecua-operator-identities"] == "ServiceAccount"
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies.values())
    off = render("admissionPolicies.enabled=false")
    assert not [d for d in off if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_namespace_scope_guard_allows_only_the_watched_namespaces():
    docs = render("rbac.scope=namespace", "rbac.watchNamespaces={team-a,team-b}")
    guard = one(docs, "ValidatingAdmissionPolicy", "kubecua-operator-guard")["spec"]
    where = guard["validations"][0]
    assert where["expression"] == (
        "request.namespace == '' || "
        '(request.namespace in ["team-a","team-b"] && request.namespace != \'kube-system\')'
    )
    assert "(team-a, team-b), and nothing in kube-system" in where["message"]


def test_namespace_scope_makes_a_role_per_watched_namespace_and_passes_them_to_kopf():
    docs = render("rbac.scope=namespace", "rbac.watchNamespaces={team-a,team-b}")
    roles = [d for d in docs if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"] == [
        "kubecua-operator-framework"
    ]
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    default = render("rbac.scope=namespace", namespace="ml")
    assert [r["metadata"]["namespace"] for r in default if r["kind"] == "Role"] == ["ml"]


def test_monitoring_objects_are_opt_in_and_carry_selector_labels():
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & {d["kind"] for d in render()}
    docs = render(
        ALL_ON,
        "serviceMonitor.labels.release=kps",
        "podMonitor.labels.release=kps",
        "prometheusRule.labels.release=kps",
    )
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kps"
    sm = one(docs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    pm = one(docs, "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "episodes"
    alerts = {r["alert"] for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert {
        "KubecuaTrainingRunStalled",
        "KubecuaRewardCollapsed",
        "KubecuaPoolDegraded",
        "KubecuaSandboxResetFailuresRising",
        "KubecuaOperatorDown",
    } <= alerts


def test_dashboard_configmaps_hold_the_generated_json_for_the_grafana_sidecar():
    docs = render("dashboards.enabled=true", "dashboards.folder=RL")
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    shipped = {p.name: p for p in (CHART / "dashboards").glob("*.json")}
    assert len(maps) == len(shipped) == 3
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "RL"}
        ((name, text),) = cm["data"].items()
        assert json.loads(text) == json.loads(shipped[name].read_text())


def test_helm_test_hook_asks_the_operator_service():
    docs = render()
    pod = one(docs, "Pod", "kubecua-operator-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    assert "http://kubecua-operator.kubecua-system.svc" in script
    assert ":8081/healthz" in script
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
