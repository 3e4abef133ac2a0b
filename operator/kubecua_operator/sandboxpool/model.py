"""What the pool controller knows about each sandbox, reduced from the objects kopf indexes.

Index functions keep a small summary per child (never the whole object), so 1,000 sandboxes cost a
few hundred kilobytes of operator memory rather than the pods' full JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_operator import names
from kubecua_operator.k8s import controller_uid
from kubecua_operator.parsed import Parsed, parse
from kubecua_operator.trainingrun.model import Run

PENDING, READY, FAILED, TERMINATING = "pending", "ready", "failed", "terminating"


# One pass's SandboxPool: its body and its spec parsed once (kubecua_operator/parsed.py).
Pool = Parsed[SandboxPoolSpec]


def parse_pool(body: dict[str, Any]) -> Pool:
    """parsed.parse for a SandboxPool. Raises kubecua_api.errors.InvalidSpec naming each field."""
    return parse(body, SandboxPoolSpec)


@dataclass(frozen=True)
class Summary:
    """One child object of a pool (Pod, Service, EndpointSlice, VirtualMachine)."""

    kind: str
    name: str
    uid: str
    sandbox: str
    role: str = ""  # which part of a sandbox: "" for the main object, "episode-server", ...
    phase: str = ""
    ready: bool = False
    unschedulable: bool = False
    deleting: bool = False
    ip: str = ""
    owner: str = ""  # uid of the controlling owner: only the pool's own children count
    waiting: str = ""  # a container's waiting reason, e.g. ErrImagePull
    shape: str = ""  # a Service's service_shape: an edit to what the operator owns changes it


@dataclass(frozen=True)
class Sandbox:
    """One sandbox, whatever backend: its state is pending, ready, failed or terminating."""

    name: str
    index: int
    state: str
    uid: str = ""
    url: str = ""
    unschedulable: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Probe:
    """The last answer of a sandbox's episode server (GET /readyz, optionally /status)."""

    ready: bool
    busy: bool
    episodes_served: int = 0


@dataclass(frozen=True)
class RunDemand:
    """What one TrainingRun asks of its pool (spec.sandboxes.capacity), kept in a kopf index."""

    run: str
    sandboxes: int  # episodes + spares
    active: bool  # neither suspended nor finished: only active runs' demand counts


# A run's phases after which it asks nothing of its pool (trainingrun/status.py writes them).
FINISHED_PHASES = ("Succeeded", "Failed")


def summarize_run_demand(run: Run) -> RunDemand | None:
    """A run's demand on its pool; None when it names no pool or asks for no capacity."""
    capacity = run.spec.sandboxes.capacity
    if not run.spec.sandboxes.pool_ref or capacity is None:
        return None
    phase = (run.body.get("status") or {}).get("phase")
    return RunDemand(
        run=run.name,
        sandboxes=capacity.episodes + capacity.spares,
        active=not run.spec.suspend and phase not in FINISHED_PHASES,
    )


def summarize_pod(body: dict[str, Any]) -> Summary:
    meta, status = body.get("metadata", {}), body.get("status", {}) or {}
    conds = {c.get("type"): c for c in status.get("conditions", []) or []}
    sched = conds.get("PodScheduled", {})
    waiting = [
        (c.get("state") or {}).get("waiting") or {} for c in status.get("containerStatuses") or []
    ]
    return Summary(
        kind="Pod",
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        sandbox=(meta.get("labels") or {}).get(names.SANDBOX_LABEL, ""),
        role=(meta.get("labels") or {}).get(names.ROLE_LABEL, ""),
        phase=status.get("phase", "Pending"),
        ready=conds.get("Ready", {}).get("status") == "True",
        unschedulable=sched.get("status") == "False" and sched.get("reason") == "Unschedulable",
        deleting=bool(meta.get("deletionTimestamp")),
        ip=status.get("podIP", "") or "",
        owner=controller_uid(body),
        waiting=next((str(w["reason"]) for w in waiting if w.get("reason")), ""),
    )


def summarize_object(kind: str, body: dict[str, Any]) -> Summary:
    """Services, EndpointSlices and VirtualMachines: existence, deletion and readiness."""
    meta, status = body.get("metadata", {}), body.get("status", {}) or {}
    ready = bool(status.get("ready"))  # VirtualMachine.status.ready
    if kind == "EndpointSlice":
        eps = body.get("endpoints") or []
        ready = bool(eps) and bool((eps[0].get("conditions") or {}).get("ready"))
    return Summary(
        kind=kind,
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        sandbox=(meta.get("labels") or {}).get(names.SANDBOX_LABEL, ""),
        phase=str(status.get("printableStatus", "")),
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        owner=controller_uid(body),
        shape=service_shape(body) if kind == "Service" else "",
    )


# The labels on a Service that the operator sets and that route or select traffic and discovery
# (EndpointSlices copy a Service's labels; trainers find sandboxes by them).
SERVICE_LABELS = (
    names.POOL_LABEL,
    names.SANDBOX_LABEL,
    names.ROLE_LABEL,
    names.COMPONENT_LABEL,
    *names.MANAGED_BY,
)


def service_shape(body: dict[str, Any]) -> str:
    """A short digest of what the operator owns in a Service: the selector, ports, type, whether
    unready pods are published, external IPs, and its own labels. The same for an object as
    built and as the API server returns it (defaults filled in), so a difference is an edit.
    Only the digest is kept: 1,000 Services' selectors and ports would cost the index far more."""
    spec, labels = body.get("spec") or {}, body.get("metadata", {}).get("labels") or {}
    ports = [
        [
            p.get("name", ""),
            p.get("port"),
            str(p.get("targetPort") or p.get("port")),
            p.get("protocol") or "TCP",
        ]
        for p in spec.get("ports") or []
    ]
    facts = {
        "selector": spec.get("selector") or {},
        "ports": ports,
        "type": spec.get("type") or "ClusterIP",
        "publishNotReady": bool(spec.get("publishNotReadyAddresses")),
        "externalIPs": sorted(spec.get("externalIPs") or []),
        "labels": {k: labels.get(k) for k in SERVICE_LABELS},
    }
    text = json.dumps(facts, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
