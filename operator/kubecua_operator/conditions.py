"""Standard Kubernetes conditions: types as PascalCase states, reasons from closed sets.

`set_condition` keeps lastTransitionTime unless the status flips, so a status recomputed every few
seconds compares equal to the stored one and is not written again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

# SandboxPool
READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"  # runs too: a child that is someone else's, or that the API refused
SCALING_LIMITED = "ScalingLimited"
DELETING = "Deleting"  # only while the pool is being deleted (held by a finalizer)
# Both kinds, while a run asks its pool for capacity (spec.sandboxes.capacity)
DEMAND_MET = "DemandMet"
# TrainingRun
SANDBOXES_READY = "SandboxesReady"
TRAINER_READY = "TrainerReady"
ADMITTED = "Admitted"  # runs with spec.kueue: Kueue's admission of the Job's Workload
FAILED = "Failed"
# TrainingRun, once its trainer has measured the warm-up (status.warmup, spec.warmup.goal)
WARMUP_BELOW_GOAL = "WarmupBelowGoal"

Condition = dict[str, Any]


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def make(ctype: str, status: bool, reason: str, message: str, generation: int) -> Condition:
    return {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def find(conditions: list[Condition], ctype: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == ctype), None)


def is_true(conditions: list[Condition], ctype: str) -> bool:
    cond = find(conditions, ctype)
    return bool(cond and cond.get("status") == "True")


def merge(old: list[Condition], new: list[Condition], now: str | None = None) -> list[Condition]:
    """Return `new` with lastTransitionTime carried over from `old` where the status did not flip.

    >>> old = [{"type": "Ready", "status": "True", "lastTransitionTime": "T0"}]
    >>> merge(old, [{"type": "Ready", "status": "True"}], now="T1")[0]["lastTransitionTime"]
    'T0'
    >>> merge(old, [{"type": "Ready", "status": "False"}], now="T1")[0]["lastTransitionTime"]
    'T1'
    """
    stamp = now or now_iso()
    out = []
    for cond in new:
        prev = find(old, cond["type"])
        same = prev is not None and prev.get("status") == cond["status"]
        when = not_future(prev.get("lastTransitionTime"), stamp) if same and prev else None
        out.append({**cond, "lastTransitionTime": when or stamp})
    return out


def not_future(stamp: str | None, now: str) -> str | None:
    """`stamp`, or None when it lies in the future (RFC 3339 UTC strings compare as times): a
    time this operator never wrote, since status is writable by whoever may patch it.

    >>> not_future("2099-01-01T00:00:00Z", "2026-11-27T00:00:00Z"), not_future("T0", "T1")
    (None, 'T0')
    """
    if stamp is None or str(stamp) > now:
        return None
    return str(stamp)


def transitions(old: list[Condition], new: list[Condition]) -> list[Condition]:
    """Conditions of `new` whose status differs from `old` (what an Event should announce)."""
    return [c for c in new if (find(old, c["type"]) or {}).get("status") != c["status"]]
