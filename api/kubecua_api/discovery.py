"""Which EndpointSlices a client of a pool may trust, and the episode URLs they name (issue 42).

A Service labelled kubecua.dev/pool=<pool> is no proof of membership: anyone who may write
Services in the namespace can label one, the EndpointSlice controller copies the label, and the
episodes sent there carry the pool's bearer token. So a slice counts only if its Service is one
the operator made for the pool (its mark, its labels, a controller reference to the pool) and
the slice belongs to that Service. The trainer's pool source (trainer/kubecua_trainer/sources/
kube.py) and `kubecua tasks verify --pool` (sandbox-image/tasks/kubecua_tasks/desktops.py) both
judge by these functions. They read kubernetes client model objects by attribute only, so this
package needs no client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubecua_api.constants import (
    GROUP,
    MANAGED_BY_LABEL,
    OPERATOR_MANAGER,
    POOL_LABEL,
    SANDBOX_LABEL,
    SANDBOXPOOL_KIND,
    URL_ANNOTATION,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set on a Service's slices by the API
EPISODE_PORT_NAME = "episodes"
EPISODE_PORT = 8000


def slice_urls(endpoint_slice: Any) -> set[str]:
    """Ready episode URLs of one discovery.k8s.io/v1 EndpointSlice (client model object).

    An external pool's slice names its sandbox's URL in the annotation kubecua.dev/url: the API
    server refuses loopback addresses in slices, so the address itself may be a placeholder."""
    annotated = (endpoint_slice.metadata.annotations or {}).get(URL_ANNOTATION)
    if annotated:
        endpoints = endpoint_slice.endpoints or []
        serving = any(ep.conditions is None or ep.conditions.ready is not False for ep in endpoints)
        return {annotated.rstrip("/")} if serving else set()
    ports = endpoint_slice.ports or []
    port = next((p.port for p in ports if p.name == EPISODE_PORT_NAME), None)
    port = port or (ports[0].port if len(ports) == 1 and ports[0].port else EPISODE_PORT)
    urls = set()
    for ep in endpoint_slice.endpoints or []:
        ready = ep.conditions.ready if ep.conditions is not None else None
        if ready is False:
            continue
        for addr in ep.addresses or []:
            host = f"[{addr}]" if ":" in addr else addr
            urls.add(f"http://{host}:{port}")
    return urls


def controller(obj: Any) -> Any:
    """The controlling owner reference of a client model object, or None."""
    refs = obj.metadata.owner_references or []
    return next((r for r in refs if r.controller), None)


def foreign_reason(service: Any, pool: str, pool_uid: str) -> str:
    """'' when a Service (V1Service) is one the operator made for `pool`, else why it is not.
    `pool_uid` '' checks the owner by kind and name only (a trainer the operator did not start).

    >>> from types import SimpleNamespace as O
    >>> def svc(labels, owner=None):
    ...     meta = O(name="desks-0", labels=labels, owner_references=[owner] if owner else None)
    ...     return O(metadata=meta)
    >>> own = {"app.kubernetes.io/managed-by": "kubecua-operator", "kubecua.dev/pool": "desks",
    ...        "kubecua.dev/sandbox": "desks-0"}
    >>> ref = O(api_version="kubecua.dev/v1alpha1", kind="SandboxPool", name="desks", uid="u1",
    ...         controller=True)
    >>> foreign_reason(svc(own, ref), "desks", "u1"), foreign_reason(svc(own, ref), "desks", "")
    ('', '')
    >>> foreign_reason(svc({"kubecua.dev/pool": "desks"}), "desks", "u1")
    'not marked app.kubernetes.io/managed-by=kubecua-operator'
    >>> foreign_reason(svc(own, ref), "desks", "u2")
    'not controlled by SandboxPool desks (uid u2)'
    """
    labels = service.metadata.labels or {}
    if labels.get(MANAGED_BY_LABEL) != OPERATOR_MANAGER:
        return f"not marked {MANAGED_BY_LABEL}={OPERATOR_MANAGER}"
    if labels.get(POOL_LABEL) != pool or labels.get(SANDBOX_LABEL) != service.metadata.name:
        return f"not labelled as a sandbox of pool {pool}"
    ref = controller(service)
    if (
        ref is None
        or ref.kind != SANDBOXPOOL_KIND
        or not ref.api_version.startswith(f"{GROUP}/")
        or ref.name != pool
        or (pool_uid and ref.uid != pool_uid)
    ):
        return f"not controlled by SandboxPool {pool}" + (f" (uid {pool_uid})" if pool_uid else "")
    return ""


def slice_of(endpoint_slice: Any, service: Any, pool: str, pool_uid: str) -> bool:
    """Whether a slice belongs to `service`: controlled by it (the EndpointSlice controller's
    slices), or by the pool itself (the operator's slices of external sandboxes)."""
    ref = controller(endpoint_slice)
    if ref is None:
        return False
    if ref.kind == "Service":
        return bool(ref.uid == service.metadata.uid)
    by_pool = ref.kind == SANDBOXPOOL_KIND and ref.name == pool
    return by_pool and (not pool_uid or ref.uid == pool_uid)


def slice_problem(
    endpoint_slice: Any,
    pool: str,
    pool_uid: str,
    known: Callable[[str], Any],
    read: Callable[[str], Any],
) -> str:
    """'' when a slice belongs to one of the pool's own Services, else why not: the rule the
    trainer's pool source and `kubecua tasks verify --pool` share. known(name) is the caller's
    Service of that name seen so far (None: not seen); read(name) reads it again (None: gone).
    A Service not seen yet, or seen with another uid than the slice's owner, is read again (a new
    sandbox, or a name that was given up and taken)."""
    name = (endpoint_slice.metadata.labels or {}).get(SERVICE_NAME_LABEL, "")
    if not name:
        return f"no {SERVICE_NAME_LABEL} label"
    service = known(name)
    ref = controller(endpoint_slice)
    if service is None or (
        ref is not None and ref.kind == "Service" and ref.uid != service.metadata.uid
    ):
        service = read(name)
        if service is None:
            return f"its Service {name} does not exist"
    why = foreign_reason(service, pool, pool_uid)
    if why:
        return f"its Service {name} is {why}"
    if not slice_of(endpoint_slice, service, pool, pool_uid):
        return f"it is not controlled by Service {name} nor by the pool"
    return ""
