"""A fixed list of episode-server URLs; readiness comes from polling each one's /readyz."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from kubecua_trainer.sources.leases import SandboxLeases


async def probe_ready(client: httpx.AsyncClient, url: str) -> bool:
    """True when GET {url}/readyz answers 200 (desktop up, screen not black)."""
    try:
        return (await client.get(f"{url}/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


class ReadinessPoller:
    """Polls /readyz of a URL list and reports the ready ones; a busy sandbox stays ready."""

    def __init__(self, urls: list[str], interval: float = 2.0) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self, client: httpx.AsyncClient) -> list[str]:
        ok = await asyncio.gather(*(probe_ready(client, u) for u in self.urls))
        return [u for u, good in zip(self.urls, ok, strict=True) if good]

    async def start(self, leases: SandboxLeases) -> None:
        client = httpx.AsyncClient(timeout=5.0)
        leases.set_ready(await self.poll_once(client))

        async def loop() -> None:
            try:
                while True:
                    await asyncio.sleep(self.interval)
                    leases.set_ready(await self.poll_once(client))
            finally:
                await client.aclose()

        self._task = asyncio.create_task(loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class StaticSource:
    def __init__(self, urls: list[str], token: str | None, interval: float = 2.0) -> None:
        self.token = token
        self._poller = ReadinessPoller(urls, interval)

    async def start(self, leases: SandboxLeases) -> None:
        leases.where = "the episode servers at spec.sandboxes.urls, polled at /readyz"
        leases.expected = len(self._poller.urls)
        await self._poller.start(leases)

    async def stop(self) -> None:
        await self._poller.stop()
