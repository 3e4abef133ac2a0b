"""Kubernetes Events about our objects, posted only after the status write they describe.

The same Event (object, reason, message) is posted at most once per event_interval_seconds, so a
spec that fails the same way on every pass leaves one Event, not one per pass.
"""

from __future__ import annotations

import logging
import time
import uuid

from kubecua_operator import settings as settings_mod
from kubecua_operator.conditions import now_iso
from kubecua_operator.k8s import Kube, Obj

log = logging.getLogger(__name__)
_last_posted: dict[tuple[str, str, str], float] = {}


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
    key = (involved["metadata"].get("uid", ""), reason, message)
    now, interval = time.monotonic(), settings_mod.get().event_interval_seconds
    if now - _last_posted.get(key, -interval - 1) < interval:
        return
    _last_posted[key] = now
    if len(_last_posted) > 10000:  # forget the oldest half; a repeat then is merely posted again
        for old in sorted(_last_posted, key=_last_posted.__getitem__)[:5000]:
            del _last_posted[old]
    try:
        kube.create(build_event(involved, reason, message, warning))
    except Exception as err:  # Events are advisory; the status already holds the truth
        log.warning("event %s on %s not posted: %s", reason, involved["metadata"]["name"], err)
