"""One reconcile loop per SandboxPool and per TrainingRun, started and stopped from watch events.

Not kopf daemons: kopf puts a finalizer on every object with a daemon, so a namespace or a CRD
could not be deleted while the operator is down. Owner references already clean up every child,
so no finalizer is needed: a loop starts when the watch shows an object and stops when it shows
the object deleted, or being deleted unless `while_deleting`. A pool's loop keeps running while
someone else's finalizer (foregroundDeletion, a user's) holds the pool, so that its status says
it is being deleted rather than keeping its last one (issue 35).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Live:
    """The latest body of one object, as the watch last delivered it."""

    def __init__(self, body: Obj) -> None:
        self.body = body
        self.stopped = False
        self.task: asyncio.Task[None] | None = None


class Loops:
    def __init__(
        self, start: Callable[[Live], Coroutine[Any, Any, None]], while_deleting: bool = False
    ) -> None:
        self.start = start
        self.while_deleting = while_deleting
        self.live: dict[tuple[str, str], Live] = {}

    def observe(self, event_type: str | None, body: Obj) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        live = self.live.get(key)
        deleting = bool(meta.get("deletionTimestamp")) and not self.while_deleting
        gone = event_type == "DELETED" or deleting
        if live is not None and (gone or live.body["metadata"].get("uid") != meta.get("uid")):
            self._stop(key)
            live = None
        if gone:
            return
        if live is not None:
            live.body = body
            return
        live = Live(body)
        live.task = asyncio.create_task(self._run(live), name=f"loop {key[0]}/{key[1]}")
        self.live[key] = live

    async def _run(self, live: Live) -> None:
        try:
            await self.start(live)
        except asyncio.CancelledError:
            raise
        except Exception:  # a loop must never die silently; the next event restarts it
            log.exception("loop of %s ended", live.body["metadata"].get("name"))
            meta = live.body["metadata"]
            if self.live.get((meta["namespace"], meta["name"])) is live:
                del self.live[(meta["namespace"], meta["name"])]

    def _stop(self, key: tuple[str, str]) -> None:
        live = self.live.pop(key)
        live.stopped = True
        if live.task is not None:
            live.task.cancel()

    async def stop_all(self) -> None:
        tasks = [live.task for live in self.live.values() if live.task is not None]
        for key in list(self.live):
            self._stop(key)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
