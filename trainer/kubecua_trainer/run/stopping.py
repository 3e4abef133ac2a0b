"""Stopping a run early without losing completed work (a suspend, an eviction: SIGTERM).

A rollout in flight is abandoned (its episodes release their sandboxes in `finally`); once a
step's rollout is complete, the step is finished instead (its optimizer step included), since a
half-applied update must never be checkpointed. The loop (train.py) then checkpoints the last
completed step, and every rank stops when any rank saw the signal (Dist.any). Handlers are
installed only when asked (the CLI), never in a test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


class Stop:
    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.finishing = False  # the current step's rollout is done: finish it, do not abandon
        self._signals: list[int] = []

    def listen(self, *signals: int, already: bool = False) -> None:
        """Stop on these signals; already: one came before the loop listened (the CLI's)."""
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self.requested.set)
            self._signals.append(sig)
        if already:
            self.requested.set()

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            loop.remove_signal_handler(sig)
        self._signals.clear()

    async def unless_stopped(self, coro: Any) -> tuple[bool, Any]:
        """(True, result) when coro completed, (False, None) when a stop abandoned it."""
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(self.requested.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and self.finishing:
                await task
        except BaseException:
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False, None
