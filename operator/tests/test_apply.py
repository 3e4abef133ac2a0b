"""Kube.apply is server-side apply (issue 23) on the real API server: it creates, puts back what
someone else changed in the fields it sets, leaves the rest alone, and writes nothing when
nothing differs. managedFields names the operator as the fields' manager."""

from __future__ import annotations

from kubecua_operator.k8s import MANAGER, Kube
from kubecua_operator.sandboxpool import children


def policy(namespace: str) -> dict:
    return children.build_network_policy("desks", namespace, [], "kubecua-system", [5000])


def managers(obj: dict) -> dict[str, dict]:
    return {m["manager"]: m for m in obj["metadata"]["managedFields"]}


def test_apply_creates_restores_its_fields_and_leaves_others_alone(kube: Kube, namespace):
    made = kube.apply(policy(namespace))
    assert made["spec"]["podSelector"] == policy(namespace)["spec"]["podSelector"]
    ours = managers(made)[MANAGER]
    assert ours["operation"] == "Apply"
    assert "f:ingress" in ours["fieldsV1"]["f:spec"]
    # Nothing differs: no write, the resourceVersion stays.
    again = kube.apply(policy(namespace))
    assert again["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]

    # Someone else opens the policy and adds a label of their own.
    edit = {"metadata": {"labels": {"team": "vision"}}, "spec": {"ingress": [{}]}}
    kube.patch("NetworkPolicy", namespace, "desks-sandboxes", edit)
    assert kube.get("NetworkPolicy", namespace, "desks-sandboxes")["spec"]["ingress"] == [{}]
    back = kube.apply(policy(namespace))
    assert back["spec"] == made["spec"]  # the operator's fields are put back
    assert back["metadata"]["labels"]["team"] == "vision"  # theirs is left alone
    owners = managers(back)
    assert "f:team" not in owners[MANAGER]["fieldsV1"]["f:metadata"]["f:labels"]
    others = [m for name, m in owners.items() if name != MANAGER]
    assert any("f:team" in str(m["fieldsV1"]) for m in others)
