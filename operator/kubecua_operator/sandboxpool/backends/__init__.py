"""Sandbox backends, by `spec.backend`: each module implements base.Backend (building, observing
and repairing one kind of sandbox) and has its entry in KINDS."""

from __future__ import annotations

from kubecua_operator.sandboxpool.backends.base import Backend, Obj, Repair
from kubecua_operator.sandboxpool.backends.external import ExternalBackend
from kubecua_operator.sandboxpool.backends.kubevirt import KubevirtBackend
from kubecua_operator.sandboxpool.backends.pod import PodBackend

__all__ = ["KINDS", "Backend", "Obj", "Repair", "get"]
KINDS: dict[str, Backend] = {
    "pod": PodBackend(),
    "kubevirt": KubevirtBackend(),
    "external": ExternalBackend(),
}


def get(kind: str) -> Backend:
    """The backend of `spec.backend` (the CRD admits only KINDS' keys)."""
    return KINDS[kind]
