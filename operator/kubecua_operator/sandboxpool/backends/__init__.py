"""Sandbox backends, picked by `spec.backend` from BACKENDS. Each one knows how to build the
objects of one sandbox and how to read a sandbox's state back from the indexed summaries."""

from __future__ import annotations

from typing import Any, Protocol

from kubecua_operator.sandboxpool.model import Probe, Sandbox, Summary
from kubecua_operator.settings import Settings

Obj = dict[str, Any]


class Backend(Protocol):
    uses_pods: bool  # NetworkPolicy applies; sandbox Services select pods

    def build(self, pool: Obj, index: int, settings: Settings) -> list[Obj]:
        """The workload objects of sandbox `index` (its Service is built separately)."""
        ...

    def parts(self, sandbox: str) -> list[tuple[str, str]]:
        """(kind, name) of every workload object of a sandbox, for deletion."""
        ...

    def observe(
        self, pool: Obj, children: list[Summary], probes: dict[str, Probe]
    ) -> list[Sandbox]:
        """Sandboxes with their state, from the pool's indexed children."""
        ...


def get(backend: str) -> Backend:
    from kubecua_operator.sandboxpool.backends import external, kubevirt, pod

    backends: dict[str, Backend] = {
        "pod": pod.PodBackend(),
        "kubevirt": kubevirt.KubevirtBackend(),
        "external": external.ExternalBackend(),
    }
    return backends[backend]
