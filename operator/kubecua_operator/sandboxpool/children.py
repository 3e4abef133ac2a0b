"""Pure constructors of a pool's shared children: token Secret, NetworkPolicy, sandbox Services.

Owner references are added by the caller with kopf.adopt(); nothing here talks to the API.
"""

from __future__ import annotations

import base64
from typing import Any

from kubecua_operator import names
from kubecua_operator.sandboxpool.model import SERVICE_LABELS

Obj = dict[str, Any]
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
DNS_EGRESS: Obj = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


USERDATA_KEY = "userdata"  # the key KubeVirt's cloudInitNoCloud.userDataSecretRef reads


def build_token_secret(pool: str, namespace: str, uid: str, token: str) -> Obj:
    """The pool's bearer token (tokens.pool_token), under a name only this pool can have.
    Immutable: nobody edits it in place, and a deleted one is recreated with the same token.
    `userdata` holds it again as the VM disk's init reads it (KEY=VALUE lines of a cloud-init
    NoCloud user-data, sandbox-image/vm/init.sh): a KubeVirt VM's userDataSecretRef names this
    Secret, so the token reaches the guest on its config drive, never baked into the disk."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.own_token_secret(pool, uid),
            "namespace": namespace,
            "labels": names.pool_labels(pool),
        },
        "type": names.TOKEN_SECRET_TYPE,
        "immutable": True,
        "data": {
            names.TOKEN_KEY: base64.b64encode(token.encode()).decode(),
            USERDATA_KEY: base64.b64encode(f"KUBECUA_SANDBOX_TOKEN={token}\n".encode()).decode(),
        },
    }


def build_network_policy(
    pool: str, namespace: str, egress: list[Obj], operator_namespace: str, vm_ports: list[int]
) -> Obj:
    """Only the pool's clients reach the sandboxes, and the operator's pods (in the operator's
    namespace only) their episode servers; egress is denied unless the pool lists rules. A
    KubeVirt pool's own traffic, episode server to VM (and DNS for the VM's Service name), is
    always allowed: with `egress: []` the episode server must still reach its desktop."""
    ports = [{"protocol": "TCP", "port": p} for p in names.PORTS.values()]
    clients = {"podSelector": {"matchLabels": {names.client_label(pool): "true"}}}
    operator = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
        "podSelector": {"matchLabels": dict(names.OPERATOR_POD_LABEL)},
    }
    ingress: list[Obj] = [
        {"from": [clients], "ports": ports},
        {"from": [operator], "ports": [{"protocol": "TCP", "port": names.PORTS["episodes"]}]},
    ]
    own: list[Obj] = []
    if vm_ports:
        part = {"matchLabels": {names.POOL_LABEL: pool, names.ROLE_LABEL: "episode-server"}}
        vms = {"matchLabels": {names.POOL_LABEL: pool, names.ROLE_LABEL: "vm"}}
        tcp = [{"protocol": "TCP", "port": p} for p in vm_ports]
        ingress.append({"from": [{"podSelector": part}], "ports": tcp})
        own = [{"to": [{"podSelector": vms}], "ports": tcp}, DNS_EGRESS]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.network_policy(pool),
            "namespace": namespace,
            "labels": names.pool_labels(pool),
        },
        "spec": {
            "podSelector": {"matchLabels": {names.POOL_LABEL: pool}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": own + list(egress),
        },
    }


def service_ports() -> list[Obj]:
    return [
        {"name": name, "port": port, "targetPort": port, "protocol": "TCP"}
        for name, port in names.PORTS.items()
    ]


def build_sandbox_service(pool: str, namespace: str, sandbox: str, selector: bool) -> Obj:
    """One Service per sandbox (8000 episodes, 5000 desktop, 9222 CDP, 8080 VLC). Pod-backed
    sandboxes select their pod; external ones have no selector and operator-written slices.
    Headless: one backend needs no virtual IP, and 1,000 sandboxes would exhaust a small service
    CIDR (kwokctl's fills at ~250) and add 1,000 kube-proxy rules for nothing."""
    spec: Obj = {"clusterIP": "None", "ports": service_ports(), "publishNotReadyAddresses": False}
    if selector:
        spec["selector"] = {names.SANDBOX_LABEL: sandbox, names.ROLE_LABEL: "episode-server"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": sandbox,
            "namespace": namespace,
            "labels": names.sandbox_labels(pool, sandbox),
        },
        "spec": spec,
    }


def service_restore_patch(current: Obj, want: Obj) -> Obj:
    """A JSON merge patch that turns `current` back into `want` in every field service_shape
    covers. A merge patch merges maps, so selector keys and labels of ours that `want` lacks are
    set to null (removed); lists (ports, externalIPs) are replaced whole. Labels of others'
    (not ours to own) stay."""
    have, spec = current.get("spec") or {}, want["spec"]
    selector: Obj | None = None
    if spec.get("selector"):
        selector = {k: None for k in have.get("selector") or {}} | spec["selector"]
    own = want["metadata"].get("labels") or {}
    present = current.get("metadata", {}).get("labels") or {}
    labels = {k: own.get(k) for k in SERVICE_LABELS if k in own or k in present}
    return {
        "metadata": {"labels": labels},
        "spec": {
            "selector": selector,
            "ports": spec["ports"],
            "type": spec.get("type", "ClusterIP"),
            "publishNotReadyAddresses": bool(spec.get("publishNotReadyAddresses")),
            "externalIPs": None,
        },
    }
