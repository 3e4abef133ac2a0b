"""The policy's lock, which also fences an optimizer update still running in the background.

Why: the offloaded AdamW's host update (speedups/optimizer.py, 2.3 s for a 3B model on an H100's
host) need not hold up the learner's step: nothing reads the new weights until the next step's
first generation, checkpoint or forward, and the desktops' set-up for the next step's episodes
takes longer than that. Everything that reads or writes the weights already holds policy.lock
(the engine's rounds, checkpoints, weight refreshes, the learner), so the lock is where the wait
goes: whoever takes it next waits for the pending update, and nobody else has to remember to.

A failed update stays pending: every later acquisition raises its error, since the weights are
then half-written and must not be used or saved.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any


class WeightsLock:
    """A re-entrant lock (threading.RLock's interface) whose acquisition first waits for the
    update handed to defer(), once; wait_log records those waits."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._pending: Callable[[], Any] | None = None
        # (time.time() at its end, seconds) of each acquisition that settled an update (finished
        # or not), the last 1,024: bench-loop sums those inside its measured window
        self.wait_log: deque[tuple[float, float]] = deque(maxlen=1024)

    def defer(self, settle: Callable[[], Any]) -> None:
        """settle() blocks until the weights are final (raising if the update failed); the next
        acquisition, by any thread, calls it. The caller holds the lock."""
        with self._lock:
            self._pending = settle

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        try:
            self._settle()
        except BaseException:
            self._lock.release()
            raise
        return True

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> WeightsLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def pending(self) -> bool:
        return self._pending is not None

    @property
    def waits(self) -> int:
        return len(self.wait_log)

    @property
    def waited_seconds(self) -> float:
        return sum(seconds for _, seconds in self.wait_log)

    def _settle(self) -> None:
        settle = self._pending
        if settle is None:
            return
        start = time.perf_counter()
        settle()  # raises while the update is broken: it stays pending
        self._pending = None
        self.wait_log.append((time.time(), time.perf_counter() - start))
