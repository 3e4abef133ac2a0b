"""Whether the operator's view of the cluster can be trusted, for pool loops and liveness.

Every API request reports here. While requests fail, the watches behind kopf's indexes are broken
too, and objects deleted meanwhile may never produce a DELETED event (kopf re-lists, but an index
keeps what the new list lacks). So when the API answers again the epoch moves on, and each pool
loop re-lists its children from the API instead of trusting the index. Liveness fails once the
API has been unreachable for longer than the grace period, so a kubelet restarts the operator
and its caches start empty.
"""

from __future__ import annotations

import time


class ApiHealth:
    def __init__(self) -> None:
        self.failing_since: float | None = None
        self.epoch = 0  # moves on each time the API answers after failing

    def ok(self) -> None:
        if self.failing_since is not None:
            self.failing_since = None
            self.epoch += 1

    def failed(self) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def unreachable_for(self) -> float:
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since


HEALTH = ApiHealth()
