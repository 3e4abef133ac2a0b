"""Golden checks of the objects a pool creates: labels, ports, probes, security, discovery."""

from __future__ import annotations

import base64
import copy

import pytest

from kubecua_operator import names
from kubecua_operator.sandboxpool import children
from kubecua_operator.sandboxpool.backends import external, kubevirt, pod
from kubecua_operator.sandboxpool.model import parse_pool, service_shape
from kubecua_operator.settings import Settings

POOL = {
    "apiVersion": "kubecua.dev/v1alpha1",
    "kind": "SandboxPool",
    "metadata": {"name": "desks", "namespace": "ns1", "uid": "u-1", "generation": 1},
    "spec": {
        "replicas": 2,
        "backend": "pod",
        "desktop": {"os": "Ubuntu", "screen": {"width": 1280, "height": 720}},
        "reset": {"verify": True},
    },
}


def test_sandbox_pod_is_labelled_probed_and_locked_down():
    p = pod.build_pod(parse_pool(POOL), 3, Settings())
    assert p["metadata"]["name"] == "desks-3"
    labels = p["metadata"]["labels"]
    assert labels[names.POOL_LABEL] == "desks"
    assert labels[names.SANDBOX_LABEL] == "desks-3"
    c = p["spec"]["containers"][0]
    assert c["image"] == "localhost/kubecua/sandbox:dev"  # what hack/build-images.sh tags
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8000}
    # A busy desktop answers probes late: no 1 s default timeouts, and a startup allowance
    # before liveness may restart a desktop that is still starting.
    probes = ("readinessProbe", "livenessProbe", "startupProbe")
    assert all(c[p]["timeoutSeconds"] >= 5 for p in probes)
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120
    assert {x["containerPort"] for x in c["ports"]} == {8000, 5000, 9222, 8080}
    assert c["securityContext"]["runAsNonRoot"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["KUBECUA_SCREEN_WIDTH"] == "1280"
    assert env["KUBECUA_SANDBOX_TOKEN_FILE"] == "/var/run/kubecua/sandbox-token/token"
    assert p["spec"]["volumes"][0]["secret"]["secretName"] == "desks-sandbox-token-u1"
    assert p["spec"]["restartPolicy"] == "Never"
    assert p["spec"]["automountServiceAccountToken"] is False


def test_sandbox_service_exposes_the_four_ports():
    svc = children.build_sandbox_service("desks", "ns1", "desks-0", selector=True)
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "episodes": 8000,
        "desktop": 5000,
        "cdp": 9222,
        "vlc": 8080,
    }
    assert svc["spec"]["selector"][names.SANDBOX_LABEL] == "desks-0"
    assert svc["spec"]["clusterIP"] == "None"
    assert "selector" not in children.build_sandbox_service("d", "n", "d-0", selector=False)["spec"]


def test_network_policy_admits_only_clients_and_denies_egress_by_default():
    np = children.build_network_policy("desks", "ns1", [], "kubecua-system", [])
    spec = np["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == []
    assert spec["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {
        "kubecua.dev/client-of-desks": "true"
    }


def test_network_policy_admits_the_operator_only_from_its_own_namespace():
    np = children.build_network_policy("desks", "ns1", [], "kubecua-system", [])
    (peer,) = np["spec"]["ingress"][1]["from"]
    assert peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "kubecua-system"}
    }
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kubecua-operator"}}
    assert np["spec"]["ingress"][1]["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_token_secret_holds_the_given_token_under_a_name_bound_to_the_pool_uid():
    a = children.build_token_secret("desks", "ns1", "0f1e2d3c-aaaa", "x" * 43)
    assert base64.b64decode(a["data"]["token"]) == b"x" * 43
    assert a["metadata"]["name"] == "desks-sandbox-token-0f1e2d3caa"
    assert a["type"] == "kubecua.dev/sandbox-token"
    assert a["immutable"] is True


@pytest.mark.parametrize(
    ("url", "kind", "address", "port"),
    [
        ("http://10.1.2.3:8000", "IPv4", "10.1.2.3", 8000),
        ("http://127.0.0.1:4321/", "FQDN", "localhost.invalid", 4321),
        ("http://desk.example", "FQDN", "desk.example", 80),
    ],
)
def test_external_url_becomes_an_endpointslice_address(url, kind, address, port):
    pool = {**POOL, "spec": {**POOL["spec"], "desktop": {"external": {"endpoints": [url]}}}}
    s = external.build_slice(parse_pool(pool), 0, ready=True)
    assert s["addressType"] == kind
    assert s["endpoints"][0]["addresses"] == [address]
    assert s["ports"] == [{"name": "episodes", "port": port, "protocol": "TCP"}]
    assert s["metadata"]["labels"]["kubernetes.io/service-name"] == "desks-0"
    assert s["endpoints"][0]["conditions"] == {"ready": True}
    assert s["metadata"]["annotations"]["kubecua.dev/url"] == url


def test_kubevirt_sandbox_is_a_vm_with_desktop_probe_and_an_episode_pod():
    spec = {
        **POOL["spec"],
        "backend": "kubevirt",
        "desktop": {
            "os": "Ubuntu",
            "kubevirt": {"containerDisk": "reg/osworld-ubuntu:1", "cpu": 2, "memory": "4Gi"},
        },
    }
    pool = {**POOL, "spec": spec}
    vm, desktop_svc, episode = kubevirt.KubevirtBackend().build(parse_pool(pool), 0, Settings())
    tmpl = vm["spec"]["template"]["spec"]
    assert vm["apiVersion"] == "kubevirt.io/v1"
    assert vm["spec"]["runStrategy"] == "Always"
    assert tmpl["volumes"][0]["containerDisk"]["image"] == "reg/osworld-ubuntu:1"
    assert tmpl["readinessProbe"]["httpGet"] == {"path": "/platform", "port": 5000}
    assert tmpl["domain"]["cpu"]["cores"] == 2
    assert tmpl["domain"]["memory"]["guest"] == "4Gi"
    assert desktop_svc["spec"]["selector"] == {
        names.SANDBOX_LABEL: "desks-0",
        names.ROLE_LABEL: "vm",
    }
    env = {e["name"]: e["value"] for e in episode["spec"]["containers"][0]["env"]}
    assert env["KUBECUA_DESKTOP_URL"] == "http://desks-0-desktop.ns1.svc:5000"
    assert env["KUBECUA_DESKTOP_OS"] == "Ubuntu"


def test_an_edited_sandbox_service_is_told_apart_and_its_restore_patch_undoes_the_edit():
    want = children.build_sandbox_service("desks", "ns1", "desks-1", selector=True)
    edited = copy.deepcopy(want)
    edited["spec"]["selector"] = {names.SANDBOX_LABEL: "desks-0", "extra": "x"}
    edited["spec"]["ports"][0]["targetPort"] = 9999
    edited["metadata"]["labels"][names.SANDBOX_LABEL] = "desks-0"
    edited["metadata"]["labels"]["team"] = "a"  # not ours: stays, and no edit of ours
    assert service_shape(edited) != service_shape(want)
    patch = children.service_restore_patch(edited, want)
    assert patch["spec"]["selector"] == {
        names.SANDBOX_LABEL: "desks-1",
        names.ROLE_LABEL: "episode-server",
        "extra": None,  # a merge patch removes a key only when told to
    }
    assert patch["spec"]["ports"] == want["spec"]["ports"]
    assert patch["spec"]["publishNotReadyAddresses"] is False
    assert patch["metadata"]["labels"][names.SANDBOX_LABEL] == "desks-1"
    assert "team" not in patch["metadata"]["labels"]
    # The API server fills in defaults (protocol, type): the same shape, nothing to restore.
    served = copy.deepcopy(want)
    served["spec"]["type"] = "ClusterIP"
    served["spec"]["sessionAffinity"] = "None"
    served["metadata"]["labels"]["team"] = "a"
    assert service_shape(served) == service_shape(want)
    # A selector added to an external pool's Service (it has none) is removed.
    bare = children.build_sandbox_service("ext", "ns1", "ext-0", selector=False)
    grabbed = copy.deepcopy(bare)
    grabbed["spec"]["selector"] = {"app": "anything"}
    assert service_shape(grabbed) != service_shape(bare)
    assert children.service_restore_patch(grabbed, bare)["spec"]["selector"] is None
