"""What one pool's loop remembers between passes (PoolMemory), and how a pass's results update
it: failures and their backoff, sandboxes it deleted, indexes whose names others hold, the fault
its status shows. All of it can be rebuilt from the world: a restarted operator starts empty.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.rest import ApiException

from kubecua_operator import statuswrite
from kubecua_operator.ownership import FOREIGN_MEMBERS, NOT_OWNED, Issue, api_message
from kubecua_operator.sandboxpool import plan
from kubecua_operator.sandboxpool.model import FAILED, READY, TERMINATING, Probe, Sandbox
from kubecua_operator.settings import Settings

Obj = dict[str, Any]


@dataclass
class PoolMemory:
    """What one pool's loop remembers between passes; all of it can be rebuilt from the world."""

    probes: dict[str, Probe] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # sandbox -> URL to probe
    failures: int = 0
    seen_failed: set[str] = field(default_factory=set)
    backoff_until: float = 0.0
    token: str = ""
    last_status: Obj | None = None
    taken: set[int] = field(default_factory=set)  # indexes whose names others' objects hold
    ghosts: set[str] = field(default_factory=set)  # uids the index has but the API does not
    deleted: set[str] = field(default_factory=set)  # sandboxes (uids) this pool deleted
    fetched: Obj | None = None  # the pool as read after an outage, while its watch lags
    gone: bool = False  # the pool was found deleted (or replaced) by a read
    verified_epoch: int = -1  # apihealth epoch of the last re-list
    verified_at: float = 0.0
    installed_checked_at: float = -1e9
    not_installed: tuple[str, str] | None = None  # the backend's (reason, message), if any
    issue: tuple[str, str] | None = None  # (reason, message) of the last refused write
    written: statuswrite.Written = ("", "")  # resourceVersions around the last status write
    shared_issues: list[Issue] = field(default_factory=list)  # shared children not written
    foreign_services: dict[int, str] = field(default_factory=dict)  # index -> whose Service
    foreign_members: list[str] = field(default_factory=list)  # Services others labelled for it


def track_failures(sandboxes: list[Sandbox], memory: PoolMemory, cfg: Settings) -> bool:
    """Count newly failed sandboxes and return whether replacing them is allowed yet."""
    now = time.monotonic()
    failed = {s.uid for s in sandboxes if s.state == FAILED}
    new = failed - memory.seen_failed
    if new:
        memory.failures += len(new)
        delay = plan.backoff_seconds(
            memory.failures, cfg.failure_backoff_seconds, cfg.failure_backoff_max_seconds
        )
        memory.backoff_until = now + delay
    memory.seen_failed = failed | (memory.seen_failed & failed)
    if not failed and all(s.state == READY for s in sandboxes if s.state != TERMINATING):
        memory.failures = 0
    return now >= memory.backoff_until


def mark_deleted(sandboxes: list[Sandbox], deleted: set[str]) -> list[Sandbox]:
    """Sandboxes this pool deleted count as terminating until the view shows them so (or gone):
    while a watch is down the index would show them ready for as long, and the status with it."""
    return [
        replace(s, state=TERMINATING) if s.uid in deleted and s.state != TERMINATING else s
        for s in sandboxes
    ]


def outcome(results: list[tuple[int, Any]], step: plan.Plan, memory: PoolMemory) -> int:
    """Sandboxes really created this pass; remembers taken indexes, the sandboxes deleted and
    the API's refusal."""
    created: set[int] = set()
    refusal = ""
    doomed = {s.index: s.uid for s, _reason in step.delete}
    for index, result in results:
        if isinstance(result, ApiException) and 400 <= (result.status or 0) < 500:
            refusal = refusal or api_message(result)
        elif isinstance(result, Issue):
            memory.taken.add(index)
            if result.kind == "Service":  # its sandbox would have no Service of the pool's
                memory.foreign_services[index] = result.message
        elif result == "created" and index in step.create:
            created.add(index)
        elif result == "deleted" and doomed.get(index):
            memory.deleted.add(doomed[index])
    memory.issue = (
        ("SandboxesRefused", f"the API server refused a sandbox: {refusal}") if refusal else None
    )
    return len(created)


def pool_issue(memory: PoolMemory) -> tuple[str, str] | None:
    """The pool-level fault its status shows (Degraded): a refused sandbox (api_message leaves
    out the object's name, so the same fault reads the same for every sandbox and the
    condition and its Event do not change from pass to pass), else a shared child or a sandbox
    Service that is someone else's, named."""
    if memory.issue:
        return memory.issue
    services = [Issue(NOT_OWNED, m) for _i, m in sorted(memory.foreign_services.items())]
    members = [members_issue(memory.foreign_members)] if memory.foreign_members else []
    found = [*members, *memory.shared_issues, *services]
    if not found:
        return None
    return found[0].reason, "; ".join(i.message for i in found)[:1024]


def members_issue(services: list[str], pool: str = "") -> Issue:
    """The foreign members' Issue (first among a pool's: they are after its bearer token).

    >>> members_issue(["evil", "x"]).message  # doctest: +ELLIPSIS
    'Services labelled kubecua.dev/pool for this pool that the operator did not make: evil, x; ...'
    """
    shown = ", ".join(services[:10]) + (f" and {len(services) - 10} more" if services[10:] else "")
    return Issue(
        FOREIGN_MEMBERS,
        f"Services labelled kubecua.dev/pool for this pool that the operator did not make: "
        f"{shown}; trainers send them no episodes (remove the label, or the Service)",
    )
