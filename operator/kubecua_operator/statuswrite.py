"""Which status a newly computed one is compared with before it is written.

A loop remembers the status it last wrote, because the watch that delivers its object lags
behind its own write: comparing with the stale object would write the same status twice. But
status is writable by whoever may patch it, so a status someone else wrote (a forged phase,
future timestamps) would then persist until the next real transition (issue 35). So the stored
object wins whenever its resourceVersion is neither the one the loop computed from nor the one
its own write returned: then someone else has written since, and the object is the truth.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
Written = tuple[str, str]  # (resourceVersion computed from, resourceVersion of the write)


def baseline(body: Obj, last: Obj | None, written: Written) -> Obj | None:
    """The status to compare with: `last` (what this loop wrote) while `body` is that write or
    the object it was computed from, else the stored one.

    >>> baseline({"metadata": {"resourceVersion": "5"}, "status": {"phase": "X"}},
    ...          {"phase": "Running"}, ("4", "5"))
    {'phase': 'Running'}
    >>> baseline({"metadata": {"resourceVersion": "6"}, "status": {"phase": "X"}},
    ...          {"phase": "Running"}, ("4", "5"))
    {'phase': 'X'}
    """
    version = str(body["metadata"].get("resourceVersion", ""))
    if last is None or version not in written:
        stored: Obj | None = body.get("status")
        return stored
    return last


def written_by(body: Obj, reply: Obj | None) -> Written:
    """What to remember after a status write answered with `reply` (the object as stored)."""
    after = str(((reply or {}).get("metadata") or {}).get("resourceVersion", ""))
    return str(body["metadata"].get("resourceVersion", "")), after
