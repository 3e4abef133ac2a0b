"""Pure constructors of a pool's shared children: token Secret, NetworkPolicy, sandbox Services.

Owner references are added by the caller with kopf.adopt(); nothing here talks to the API.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from kubecua_operator import names

Obj = dict[str, Any]


def build_token_secret(pool: str, namespace: str) -> Obj:
    """A fresh random bearer token. Created once: a Secret that exists (e.g. an external pool's
    own token, made by the user beforehand) is never overwritten."""
    token = secrets.token_urlsafe(32)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.token_secret(pool),
            "namespace": namespace,
            "labels": names.pool_labels(pool),
        },
        "type": "Opaque",
        "data": {names.TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def build_network_policy(pool: str, namespace: str, egress: list[Obj]) -> Obj:
    """Only the pool's clients (and the operator, for polling) reach the sandboxes; egress is
    denied unless the pool lists rules."""
    ports = [{"protocol": "TCP", "port": p} for p in names.PORTS.values()]
    clients = {"podSelector": {"matchLabels": {names.client_label(pool): "true"}}}
    operator = {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": dict(names.OPERATOR_POD_LABEL)},
    }
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
            "ingress": [
                {"from": [clients], "ports": ports},
                {"from": [operator], "ports": [{"protocol": "TCP", "port": 8000}]},
            ],
            "egress": list(egress),
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
