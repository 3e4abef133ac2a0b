"""Writes onto a pool's or run's children only where the child is its own (issue 35, item 4).

Children have derived names (`<run>-config`, `<run>-trainer`, `<pool>-sandboxes`), so a user who
may create runs can pick a name whose child already exists and belongs to someone else. A
server-side apply onto it would take it over: another team's ConfigMap mounted into the
trainer, an existing account become the trainer's identity, a NetworkPolicy replaced, and all of
them garbage-collected with the run. So every write is preceded by a read: an absent child is
made, one controlled by the owner (by uid) is kept equal to its spec, one that lost its owner
reference but still carries the owner's label and the operator's own mark (a label the
admission guard lets nobody else set) is adopted again; anything else is left alone and
reported as an Issue naming it. A write the API server refuses (422, 403: a schema rule, the
admission guard) is an Issue carrying the server's message, never an exception that stops the
owner's status from being computed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from kubecua_operator import names
from kubecua_operator.k8s import Kube, controller_uid

Obj = dict[str, Any]
NOT_OWNED, REFUSED = "ChildNotOwned", "ChildRefused"  # Issue reasons (Degraded conditions)
FOREIGN_MEMBERS = "ForeignMembers"  # Services labelled for a pool that it did not make


@dataclass(frozen=True)
class Issue:
    """Why a child could not be written: a Degraded condition's reason and message."""

    reason: str
    message: str
    kind: str = ""  # the child's kind, where the caller tells kinds apart


def api_message(err: ApiException) -> str:
    """The API's reasons (field: message for each cause), else its message, at most 512
    characters: what a condition and its Event show."""
    try:
        status = json.loads(err.body or "{}")
    except ValueError:
        return str(err.reason)
    causes = (status.get("details") or {}).get("causes") or []
    text = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)
    return (text or str(status.get("message") or err.reason))[:512]


def refused(err: ApiException) -> bool:
    """A refusal to report (bad request, forbidden, invalid), not an outage to retry."""
    return err.status in (400, 403, 422)


def marked_as(current: Obj, want: Obj) -> bool:
    """`current` carries the operator's mark and the owner's label(s) that `want` carries."""
    have = current.get("metadata", {}).get("labels") or {}
    mine = want["metadata"].get("labels") or {}
    keys = [k for k in (names.POOL_LABEL, names.RUN_LABEL) if k in mine]
    return (
        bool(keys)
        and all(have.get(k) == v for k, v in names.MANAGED_BY.items())
        and all(have.get(k) == mine[k] for k in keys)
    )


def foreign(current: Obj | None, want: Obj, owner_uid: str) -> Issue | None:
    """An Issue when `current` (the stored child, None if absent) is not the owner's to write."""
    if current is None:
        return None
    uid = controller_uid(current)
    if uid == owner_uid or (not uid and marked_as(current, want)):
        return None
    meta = want["metadata"]
    whose = f"controlled by another object (uid {uid})" if uid else "not made by the operator"
    return Issue(
        NOT_OWNED,
        f"{want['kind']} {meta['name']} already exists and is {whose}: left alone; "
        "delete or rename it, or rename this object",
        want["kind"],
    )


def apply_owned(api: Kube, want: Obj, owner_uid: str) -> Issue | None:
    """Server-side apply `want` (owner reference included) unless the stored object is someone
    else's; an orphan with the owner's marks is adopted again by the same apply."""
    meta = want["metadata"]
    try:
        issue = foreign(api.get(want["kind"], meta["namespace"], meta["name"]), want, owner_uid)
        if issue is None:
            api.apply(want)
        return issue
    except ApiException as err:
        if not refused(err):
            raise
        return Issue(REFUSED, f"the API server refused {want['kind']} {meta['name']}: "
                              f"{api_message(err)}")  # fmt: skip


def create_owned(api: Kube, want: Obj, owner_uid: str) -> Issue | None:
    """Create `want` once (later passes leave it as it is: a Job); a namesake that exists is
    checked like apply_owned's."""
    meta = want["metadata"]
    try:
        if api.create(want):
            return None
        return foreign(api.get(want["kind"], meta["namespace"], meta["name"]), want, owner_uid)
    except ApiException as err:
        if not refused(err):
            raise
        return Issue(REFUSED, f"the API server refused {want['kind']} {meta['name']}: "
                              f"{api_message(err)}")  # fmt: skip
