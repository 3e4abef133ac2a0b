"""Hand out sandboxes to episodes: wait when all are busy, never evict, cool off bad ones.

Sources (static, local, Kubernetes) only report which episode-server URLs are ready right now with
`set_ready()`. Episodes take one with `async with leases.lease() as lease:`. A lease is
exclusive inside this trainer; across trainers the episode server itself answers 409, and the
episode loop then calls `lease.busy()` so the sandbox is skipped briefly and another one is tried.
A sandbox that errored (`lease.bad()`) is not handed out again for `cooloff_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class Lease:
    url: str
    _cooloff: float = field(default=0.0, repr=False)

    def bad(self, seconds: float | None = None) -> None:
        """The sandbox failed (5xx, lost, setup error): do not hand it out for a while."""
        self._cooloff = -1.0 if seconds is None else seconds

    def busy(self, seconds: float = 2.0) -> None:
        """Someone else holds it (409): skip it briefly; it is not at fault."""
        self._cooloff = seconds


class SandboxLeases:
    def __init__(self, cooloff_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.cooloff_seconds = cooloff_seconds
        self._clock = clock
        self._ready: list[str] = []  # in arrival order, for a stable round-robin
        self._leased: set[str] = set()
        self._cooling: dict[str, float] = {}  # url -> monotonic time it may be used again
        self._changed = asyncio.Condition()
        self._next = 0
        self._wakers: set[asyncio.Task[None]] = set()
        # Seconds the sandboxes were held by this process's episodes, summed (cost.py): each
        # episode adds its own, from its start request to its release's answer, which comes
        # after the sandbox's reset (rollout/episode.py). Evaluation's episodes count too.
        self.held_seconds = 0.0
        self.names: dict[str, str] = {}  # url -> sandbox name, where the source knows it
        # What the sandboxes are and how many the source expects, for wait_ready's timeout
        # message (the source sets them; None: it cannot know, as a pool that scales).
        self.where = "spec.sandboxes"
        self.expected: int | None = None

    # -- what sources call -------------------------------------------------------------------
    def set_ready(self, urls: list[str] | set[str]) -> None:
        """Replace the ready set. A leased sandbox that drops out stays leased until released."""
        wanted = list(dict.fromkeys(urls))
        self._ready = [u for u in self._ready if u in wanted] + [
            u for u in wanted if u not in self._ready
        ]
        self._notify()

    # -- what episodes call ------------------------------------------------------------------
    @asynccontextmanager
    async def lease(self, within: float | None = None) -> AsyncIterator[Lease]:
        """Wait (up to `within` seconds, or forever) for a free sandbox and hold it."""
        url = await asyncio.wait_for(self._acquire(), within)
        lease = Lease(url)
        try:
            yield lease
        finally:
            self._release(lease)

    async def wait_ready(self, count: int, within: float | None = None) -> None:
        """Block until at least `count` sandboxes are ready (TrainingRun spec minReady); a
        TimeoutError after `within` seconds says what it waited for, how long, and how many of
        how many were ready (`where` and `expected`, which the source sets)."""

        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self._ready) >= count)

        try:
            await asyncio.wait_for(_wait(), within)
        except TimeoutError:
            of = f" of {self.expected}" if self.expected is not None else ""
            raise TimeoutError(
                f"waited {within:g} s for {count} ready sandbox(es) ({self.where}):"
                f" {len(self._ready)}{of} ready"
            ) from None

    # -- counts for metrics and the console ----------------------------------------------------
    @property
    def ready(self) -> list[str]:
        return list(self._ready)

    def counts(self) -> dict[str, int]:
        now = self._clock()
        cooling = sum(1 for u in self._ready if self._cooling.get(u, 0) > now)
        return {"ready": len(self._ready), "leased": len(self._leased), "cooling": cooling}

    # -- internals ---------------------------------------------------------------------------
    async def _acquire(self) -> str:
        async with self._changed:
            while True:
                url, wake_in = self._pick()
                if url is not None:
                    self._leased.add(url)
                    return url
                # woken by a release or a readiness change, or when a cool-off ends
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wake_in)

    def _pick(self) -> tuple[str | None, float | None]:
        now = self._clock()
        soonest: float | None = None
        n = len(self._ready)
        for i in range(n):
            url = self._ready[(self._next + i) % n]
            if url in self._leased:
                continue
            until = self._cooling.get(url, 0.0)
            if until > now:
                soonest = until - now if soonest is None else min(soonest, until - now)
                continue
            self._cooling.pop(url, None)
            self._next = (self._next + i + 1) % n
            return url, None
        return None, soonest

    def _release(self, lease: Lease) -> None:
        self._leased.discard(lease.url)
        if lease._cooloff:
            seconds = self.cooloff_seconds if lease._cooloff < 0 else lease._cooloff
            self._cooling[lease.url] = self._clock() + seconds
        self._notify()

    def _notify(self) -> None:
        async def _wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        try:
            task = asyncio.get_running_loop().create_task(_wake())
        except RuntimeError:
            return  # no loop yet: nobody can be waiting
        self._wakers.add(task)  # keep a reference until it ran
        task.add_done_callback(self._wakers.discard)
