"""External backend: sandboxes that run elsewhere, given by URL.

Each becomes a selector-less Service plus an EndpointSlice the operator writes, so trainers discover
them exactly like pod sandboxes (EndpointSlices labelled kubecua.dev/pool). Readiness comes from the
operator polling each episode server's /readyz. Every slice also carries its URL in the annotation
kubecua.dev/url, which clients should prefer: the API server refuses loopback IPs and one-label
names such as `localhost` in EndpointSlices, so a loopback URL (local development and tests) gets
the placeholder FQDN `localhost.invalid` as its address. Hostnames become FQDN slices.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from kubecua_api.constants import URL_ANNOTATION
from kubecua_operator import names
from kubecua_operator.sandboxpool.backends.base import Backend, Obj, Repair
from kubecua_operator.sandboxpool.model import (
    PENDING,
    READY,
    TERMINATING,
    Pool,
    Probe,
    Sandbox,
    Summary,
)
from kubecua_operator.settings import Settings

SLICE_MANAGER = "kubecua.dev-operator"
LOOPBACK_PLACEHOLDER = "localhost.invalid"  # RFC 6761: never resolves; read kubecua.dev/url


def endpoint_urls(pool: Pool) -> list[str]:
    external = pool.spec.desktop.external
    return list(external.endpoints) if external else []


def slice_address(url: str) -> tuple[str, str, int]:
    """(addressType, address, port) of an episode-server URL.

    >>> slice_address("http://10.0.0.5:8000")
    ('IPv4', '10.0.0.5', 8000)
    >>> slice_address("http://127.0.0.1:41234")
    ('FQDN', 'localhost.invalid', 41234)
    >>> slice_address("http://desk-7.lab.example")
    ('FQDN', 'desk-7.lab.example', 80)
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "FQDN", host, port
    if ip.is_loopback:
        return "FQDN", LOOPBACK_PLACEHOLDER, port
    return ("IPv4" if ip.version == 4 else "IPv6"), host, port


def build_slice(pool: Pool, index: int, ready: bool) -> Obj:
    name = names.sandbox_name(pool.name, index)
    url = endpoint_urls(pool)[index]
    kind, address, port = slice_address(url)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": pool.namespace,
            "labels": {
                **names.sandbox_labels(pool.name, name),
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER,
            },
            "annotations": {URL_ANNOTATION: url},
        },
        "addressType": kind,
        "endpoints": [{"addresses": [address], "conditions": {"ready": ready}}],
        "ports": [{"name": "episodes", "port": port, "protocol": "TCP"}],
    }


class ExternalBackend(Backend):
    uses_pods = False  # no pods to mount a token or to select with a policy
    recycles = False  # the operator cannot recreate a machine it did not make

    def build(self, pool: Pool, index: int, settings: Settings) -> list[Obj]:
        return [build_slice(pool, index, ready=False)]

    def parts(self, sandbox: str) -> list[tuple[str, str]]:
        return [("EndpointSlice", sandbox)]

    def observe(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe]
    ) -> list[Sandbox]:
        urls, out = endpoint_urls(pool), []
        for obj in children:
            index = names.sandbox_index(pool.name, obj.name)
            if obj.kind != "EndpointSlice" or index is None:
                continue
            probe = probes.get(obj.name)
            state = READY if obj.ready else PENDING
            if obj.deleting or index >= len(urls):
                state = TERMINATING if obj.deleting else PENDING
            url = urls[index] if index < len(urls) else ""
            out.append(Sandbox(obj.name, index, state, obj.uid, url, reason=str(probe)))
        return out

    def token_secret(self, pool: str, uid: str) -> str:
        """`<pool>-sandbox-token`, made by the pool's owner beforehand: the operator makes
        nothing for sandboxes it does not run."""
        return names.token_secret(pool)

    def cap(self, pool: Pool) -> int | None:
        """No more sandboxes than endpoints."""
        return len(endpoint_urls(pool))

    def repairs(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe], settings: Settings
    ) -> list[Repair]:
        """Slices whose ready condition disagrees with the last probe, rebuilt to be applied."""
        urls, out = endpoint_urls(pool), list[Repair]()
        for obj in children:
            index = names.sandbox_index(pool.name, obj.name)
            if obj.kind != "EndpointSlice" or index is None or index >= len(urls) or obj.deleting:
                continue
            probe = probes.get(obj.name)
            ready = bool(probe and probe.ready)
            if ready != obj.ready:
                out.append(("apply", build_slice(pool, index, ready)))
        return out
