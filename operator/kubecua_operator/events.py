"""Kubernetes Events about our objects, posted only after the status write they describe."""

from __future__ import annotations

import logging
import uuid

from kubecua_operator.conditions import now_iso
from kubecua_operator.k8s import Kube, Obj

log = logging.getLogger(__name__)


def build_event(involved: Obj, reason: str, message: str, warning: bool = False) -> Obj:
    meta = involved["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "firstTimestamp": now_iso(),
        "lastTimestamp": now_iso(),
        "count": 1,
        "source": {"component": "kubecua-operator"},
        "reportingComponent": "kubecua.dev/operator",
    }


def post(kube: Kube, involved: Obj, reason: str, message: str, warning: bool = False) -> None:
    """Best effort: an Event that cannot be written is logged, never fails a reconcile."""
    try:
        kube.create(build_event(involved, reason, message, warning))
    except Exception as err:  # Events are advisory; the status already holds the truth
        log.warning("event %s on %s not posted: %s", reason, involved["metadata"]["name"], err)
