"""The per-pool loop: a pass (reconcile.py) on every child or pool event, debounced, and at least
every resync period; beside it, a prober task that refreshes the episode-server probes and wakes
the pass when an answer changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import kopf

from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_operator import metrics, wakeups
from kubecua_operator import settings as settings_mod
from kubecua_operator.loops import Live
from kubecua_operator.parsed import parse_or_none
from kubecua_operator.sandboxpool import backends, plan, prober
from kubecua_operator.sandboxpool.memory import PoolMemory
from kubecua_operator.sandboxpool.reconcile import reconcile_pool
from kubecua_operator.sandboxpool.view import LISTED, pool_children, pool_demands

log = logging.getLogger(__name__)


async def probe_loop(key: wakeups.Key, memory: PoolMemory, want_status: Callable[[], bool]) -> None:
    """Refresh probes forever; wake the pool's reconcile when an answer changed."""
    cfg = settings_mod.get()
    while True:
        if cfg.poll_episodes and memory.targets:
            fresh = await prober.probe_all(
                dict(memory.targets), memory.token, want_status(),
                cfg.poll_timeout_seconds, cfg.poll_concurrency,
            )  # fmt: skip
            if fresh != memory.probes:
                memory.probes = fresh
                wakeups.signal(*key)
        await asyncio.sleep(cfg.poll_seconds)


async def run_pool_loop(
    live: Live, indexes: list[kopf.Index], demands: kopf.Index | None = None
) -> None:
    """The per-pool loop: reconcile on events (debounced) and at least every resync period.
    `live.body` is the pool as last seen by the watch; `live.stopped` ends the loop. `demands`:
    the index of runs' demand by pool (main.run_demand)."""
    cfg = settings_mod.get()
    meta = live.body["metadata"]
    key: wakeups.Key = ("SandboxPool", meta["namespace"], meta["name"])
    wakeups.register(key)
    memory = PoolMemory()

    def want_status() -> bool:  # episode counts matter only to a pool that recycles
        pool = parse_or_none(live.body, SandboxPoolSpec)  # raising would end the prober
        if pool is None:
            return False
        spec = pool.spec
        return plan.plan_options(spec, backends.get(spec.backend).recycles).recycle_after > 0

    poller = asyncio.create_task(probe_loop(key, memory, want_status))
    try:
        while not live.stopped:
            body = live.body
            try:
                with metrics.timed_reconcile("SandboxPool"):
                    await reconcile_pool(
                        body, pool_children(body, indexes), memory, pool_demands(body, demands)
                    )
            except Exception as err:  # the next pass retries from the world's state
                log.exception("reconcile of pool %s/%s failed: %s", *key[1:], err)
            await wakeups.wait(key, cfg.resync_seconds)
            await asyncio.sleep(cfg.debounce_seconds)  # coalesce a burst of child events
    finally:
        poller.cancel()
        wakeups.forget(key)
        LISTED.pop((meta["namespace"], meta["name"]), None)
        metrics.forget_pool(meta["namespace"], meta["name"])
