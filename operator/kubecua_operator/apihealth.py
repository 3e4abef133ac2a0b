"""Whether the operator's view of the cluster can be trusted, for pool loops and liveness.

Every API request reports here. While requests fail, the watches behind kopf's indexes are broken
too, and objects deleted meanwhile may never produce a DELETED event (kopf re-lists, but an index
keeps what the new list lacks). So when the API answers again the epoch moves on, and each pool
loop re-lists its children from the API instead of trusting the index. Liveness fails once the
API has been unreachable for longer than the grace period, so a kubelet restarts the operator
and its caches start empty. It fails too once RBAC has denied every request for as long (its
ClusterRoleBinding deleted, say): the API answers, but the operator can do nothing, and every
status it shows goes stale while its health would otherwise stay 200.
"""

from __future__ import annotations

import re
import time

# The authorizer's refusal names the user and the verb; an admission refusal or a namespace
# being deleted is a 403 too, but says something else.
# (Matched in the raw JSON body, where the quotes are escaped.)
RBAC_DENIAL = re.compile(r'User \\?"[^"\\]*\\?" cannot [a-z]+ resource')


class ApiHealth:
    def __init__(self) -> None:
        self.failing_since: float | None = None
        self.denied_since: float | None = None
        self.epoch = 0  # moves on each time the API answers after failing

    def denied(self, message: str) -> None:
        """A 403; counted when RBAC's (see RBAC_DENIAL)."""
        if self.denied_since is None and RBAC_DENIAL.search(message):
            self.denied_since = time.monotonic()

    def denied_for(self) -> float:
        return 0.0 if self.denied_since is None else time.monotonic() - self.denied_since

    def ok(self) -> None:
        self.denied_since = None
        if self.failing_since is not None:
            self.failing_since = None
            self.epoch += 1

    def resync(self) -> None:
        """A watch is back after it was down (watches.py): what it missed meanwhile (a deletion,
        a pool's new spec) is in no index, so every loop re-reads as after an outage."""
        self.epoch += 1

    def failed(self) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def unreachable_for(self) -> float:
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since


HEALTH = ApiHealth()
