"""Sandbox leases and sources: wait when busy, never evict, cool off bad ones, live readiness."""

from __future__ import annotations

import asyncio

import pytest
from loopback_sandbox import LoopbackSandbox

from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.static import StaticSource

pytestmark = pytest.mark.asyncio


async def test_lease_waits_when_all_busy_and_never_evicts() -> None:
    leases = SandboxLeases()
    leases.set_ready(["http://a", "http://b"])
    async with leases.lease() as first, leases.lease() as second:
        assert {first.url, second.url} == {"http://a", "http://b"}
        waiter = asyncio.create_task(_lease_url(leases))
        await asyncio.sleep(0)  # let it try: it must block, not take a held sandbox
        assert not waiter.done()
        assert leases.counts()["leased"] == 2
    assert await asyncio.wait_for(waiter, 5) in {"http://a", "http://b"}


async def _lease_url(leases: SandboxLeases) -> str:
    async with leases.lease() as lease:
        return lease.url


async def test_bad_sandbox_cools_off_until_its_time_has_passed() -> None:
    now = [100.0]
    leases = SandboxLeases(cooloff_seconds=30, clock=lambda: now[0])
    leases.set_ready(["http://a", "http://b"])
    async with leases.lease() as lease:
        bad = lease.url
        lease.bad()
    for _ in range(3):  # only the good one is handed out while the bad one cools off
        async with leases.lease() as lease:
            assert lease.url != bad
    assert leases.counts()["cooling"] == 1
    now[0] += 31
    got = {await _lease_url(leases) for _ in range(2)}
    assert got == {"http://a", "http://b"}


async def test_waiter_wakes_when_a_sandbox_becomes_ready() -> None:
    leases = SandboxLeases()
    waiter = asyncio.create_task(_lease_url(leases))
    ready = asyncio.create_task(leases.wait_ready(1, within=5))
    await asyncio.sleep(0)
    assert not waiter.done()
    leases.set_ready(["http://late"])
    await ready
    assert await asyncio.wait_for(waiter, 5) == "http://late"


async def test_leased_sandbox_that_drops_out_is_not_taken_away() -> None:
    leases = SandboxLeases()
    leases.set_ready(["http://a"])
    async with leases.lease() as lease:
        leases.set_ready([])
        assert lease.url == "http://a"
        assert leases.counts() == {
            "ready": 0,
            "leased": 1,
            "cooling": 0,
        }
    with pytest.raises(TimeoutError):
        await _wait_lease(leases, 0.2)


async def _wait_lease(leases: SandboxLeases, within: float) -> None:
    async with leases.lease(within=within):
        pass


async def test_static_source_tracks_readyz_live() -> None:
    with LoopbackSandbox() as up, LoopbackSandbox() as down:
        down.ready = False
        dead = "http://127.0.0.1:9"  # discard port: connection refused
        source = StaticSource([up.url, down.url, dead], token=None, interval=0.05)
        leases = SandboxLeases()
        await source.start(leases)
        try:
            assert leases.ready == [up.url]
            down.ready = True
            await leases.wait_ready(2, within=5)
            assert set(leases.ready) == {up.url, down.url}
            up.ready = False
            await _until(lambda: leases.ready == [down.url])
        finally:
            await source.stop()


async def _until(cond, within: float = 5.0) -> None:
    """Poll a condition that no event announces (readiness seen over HTTP or a watch)."""
    async with asyncio.timeout(within):
        while True:
            if cond():
                return
            await asyncio.sleep(0.02)
