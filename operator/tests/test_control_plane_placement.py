"""Sandboxes stay off control-plane nodes (issue 42): with the chart's default values its placement
admission policy refuses a SandboxPool that tolerates a control-plane taint (or every taint) or
selects control-plane nodes by label, naming the field; `sandboxes.allowControlPlane=true`
renders no such policy. On the real API server, with the policy rendered by `helm template`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from .conftest import wait_until
from .helpers import pool_manifest
from .test_admission_guard import create, refusal
from .test_security import render

RELEASE, OP_NS = "placement", "kubecua-placement"
POLICY = f"{RELEASE}-kubecua-operator-placement"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
ALLOW = "sandboxes.allowControlPlane=true"


def placement_docs(*sets: str) -> list[dict]:
    """The chart's placement policy and binding, as `helm template` renders them."""
    docs = yaml.safe_load_all(render("admissionpolicies.yaml", sets=sets, release=RELEASE,
                                     namespace=OP_NS))  # fmt: skip
    return [d for d in docs if d and d["metadata"]["name"] == POLICY]


@pytest.fixture(scope="module")
def placement(cluster: Any, crds: None) -> Iterator[None]:
    docs = placement_docs()
    text = yaml.safe_dump_all(docs)
    cluster.kubectl("apply", "-f", "-", input=text)
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=text, check=False)


def pod_pool(name: str, **pod: Any) -> dict:
    return pool_manifest(name, "", 1, desktop={"pod": pod})


REFUSED = [
    ({"tolerations": [{"key": CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"}]},
     f"spec.desktop.pod.tolerations: Forbidden: a toleration of {CONTROL_PLANE} would let"),
    ({"tolerations": [{"key": "gpu", "operator": "Exists"},
                      {"key": "node-role.kubernetes.io/master", "value": ""}]},
     "a toleration of node-role.kubernetes.io/master would let sandboxes run on control-plane"),
    ({"tolerations": [{"operator": "Exists"}]},
     "a toleration of every taint (operator Exists without a key)"),
    ({"nodeSelector": {CONTROL_PLANE: ""}},
     f"spec.desktop.pod.nodeSelector: Forbidden: {CONTROL_PLANE} selects control-plane nodes"),
]  # fmt: skip


def test_default_values_render_the_policy_and_allow_control_plane_renders_none() -> None:
    assert [d["kind"] for d in placement_docs()] == [
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    ]  # fmt: skip
    assert placement_docs(ALLOW) == []


@pytest.mark.parametrize(("pod", "message"), REFUSED, ids=range(len(REFUSED)))
def test_a_pool_placed_on_the_control_plane_is_refused_naming_the_field(
    kube: Any, placement: None, namespace: str, pod: dict, message: str
) -> None:
    # The policy takes effect a moment after it is stored.
    got = wait_until(lambda: refusal(create, kube, pod_pool("cp", **pod), namespace), 30,
                     "the placement policy")  # fmt: skip
    assert message in got
    assert "the chart value sandboxes.allowControlPlane allows it" in got


def test_pools_placed_off_the_control_plane_are_admitted_and_stored(
    kube: Any, placement: None, namespace: str
) -> None:
    wait_until(lambda: refusal(create, kube, pod_pool("probe", **REFUSED[0][0]), namespace), 30,
               "the placement policy")  # fmt: skip
    pod = {
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node-role.kubernetes.io/control-plane-ish", "operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": ""},
    }  # fmt: skip
    assert refusal(create, kube, pod_pool("workers", **pod), namespace, False) == ""
    stored = kube.get("SandboxPool", namespace, "workers")
    assert stored["spec"]["desktop"]["pod"]["nodeSelector"] == pod["nodeSelector"]
