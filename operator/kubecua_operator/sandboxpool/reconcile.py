"""reconcile_pool: one level-based pass over a SandboxPool, and the per-pool loop that runs it.

A pass reads the world (kopf indexes of the pool's children, the last episode-server probes),
plans with plan.make_plan, writes the difference, then writes the whole status once if it changed
and posts Events after that write. The loop runs a pass on every child or pool event (debounced)
and at least every resync period; a prober task refreshes the probes beside it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import kopf

from kubecua_operator import conditions, events, metrics, names, wakeups
from kubecua_operator import settings as settings_mod
from kubecua_operator.k8s import Kube, adopt, kube
from kubecua_operator.sandboxpool import backends, children, plan, prober, status
from kubecua_operator.sandboxpool.backends.external import ExternalBackend
from kubecua_operator.sandboxpool.backends.kubevirt import KubevirtBackend
from kubecua_operator.sandboxpool.model import (
    FAILED,
    READY,
    TERMINATING,
    Probe,
    Sandbox,
    Summary,
    summarize_object,
)

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass
class PoolMemory:
    """What one pool's loop remembers between passes; all of it can be rebuilt from the world."""

    probes: dict[str, Probe] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # sandbox -> URL to probe
    failures: int = 0
    seen_failed: set[str] = field(default_factory=set)
    backoff_until: float = 0.0
    ensured_generation: int = -1
    token: str = ""
    last_status: Obj | None = None


async def call(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


async def run_all(jobs: list[Any], limit: int) -> None:
    """Run blocking API calls `(fn, *args)` concurrently, at most `limit` at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(job: tuple) -> None:
        async with gate:
            await call(*job)

    # One refused write must not stop the others; the next pass retries what is still missing.
    results = await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:
        log.warning("%d of %d API writes failed; first: %s", len(errors), len(jobs), errors[0])


async def ensure_shared(
    api: Kube, body: Obj, backend: backends.Backend, memory: PoolMemory
) -> None:
    """Token Secret (create-only) and NetworkPolicy, once per spec generation."""
    meta = body["metadata"]
    if memory.ensured_generation == meta.get("generation"):
        return
    secret = children.build_token_secret(meta["name"], meta["namespace"])
    adopt(secret, body)
    await call(api.create, secret)
    if backend.uses_pods:
        egress = body["spec"].get("egress") or []
        policy = children.build_network_policy(meta["name"], meta["namespace"], egress)
        adopt(policy, body)
        await call(api.apply, policy)
    stored = await call(api.get, "Secret", meta["namespace"], names.token_secret(meta["name"]))
    data = (stored or {}).get("data") or {}
    memory.token = base64.b64decode(data.get(names.TOKEN_KEY, "")).decode()
    memory.ensured_generation = meta.get("generation", 0)


def track_failures(sandboxes: list[Sandbox], memory: PoolMemory, cfg: Any) -> bool:
    """Count newly failed sandboxes and return whether replacing them is allowed yet."""
    now = time.monotonic()
    failed = {s.uid for s in sandboxes if s.state == FAILED}
    new = failed - memory.seen_failed
    if new:
        memory.failures += len(new)
        delay = plan.backoff_seconds(
            memory.failures, cfg.failure_backoff_seconds, cfg.failure_backoff_max_seconds
        )
        memory.backoff_until = now + delay
    memory.seen_failed = failed | (memory.seen_failed & failed)
    if not failed and all(s.state == READY for s in sandboxes if s.state != TERMINATING):
        memory.failures = 0
    return now >= memory.backoff_until


def service_jobs(
    api: Kube, body: Obj, kids: list[Summary], keep: set[int], uses_pods: bool
) -> list:
    """Create a Service for every kept sandbox index; delete Services of indexes that are gone."""
    meta = body["metadata"]
    pool, ns = meta["name"], meta["namespace"]
    have = {s.name: s for s in kids if s.kind == "Service" and s.sandbox}
    jobs: list = []
    for index in sorted(keep):
        name = names.sandbox_name(pool, index)
        if name not in have:
            svc = children.build_sandbox_service(pool, ns, name, selector=uses_pods)
            adopt(svc, body)
            jobs.append((api.create, svc))
    for name, found in have.items():
        idx = names.sandbox_index(pool, name)
        if idx is not None and idx not in keep and not found.deleting:
            jobs.append((api.delete, "Service", ns, name, found.uid))
    return jobs


def workload_jobs(api: Kube, body: Obj, backend: backends.Backend, step: plan.Plan) -> list:
    cfg, ns = settings_mod.get(), body["metadata"]["namespace"]
    jobs: list = []
    for index in step.create:
        for obj in backend.build(body, index, cfg):
            adopt(obj, body)
            jobs.append((api.create, obj))
    for sandbox, _reason in step.delete:
        for i, (kind, name) in enumerate(backend.parts(sandbox.name)):
            jobs.append((api.delete, kind, ns, name, sandbox.uid if i == 0 else ""))
    return jobs


def repair_jobs(
    api: Kube, body: Obj, backend: backends.Backend, kids: list[Summary], memory: PoolMemory
) -> list:
    """Backend-specific fixes: external slices' readiness, VMs' lost episode-server pods."""
    if isinstance(backend, ExternalBackend):
        return [(api.apply, s) for s in backend.slice_updates(body, kids, memory.probes)]
    if isinstance(backend, KubevirtBackend):
        parts = backend.missing_parts(body, kids, settings_mod.get())
        return [(api.create, adopt(obj, body)) for obj in parts]
    return []


async def reconcile_pool(body: Obj, kids: list[Summary], memory: PoolMemory) -> None:
    api, cfg = kube(), settings_mod.get()
    spec, meta = body["spec"], body["metadata"]
    backend = backends.get(spec.get("backend", "pod"))
    await ensure_shared(api, body, backend, memory)
    if spec.get("backend") == "kubevirt":  # VMs are listed, not watched: KubeVirt may be absent
        vms = await call(
            api.list, "VirtualMachine", meta["namespace"], f"{names.POOL_LABEL}={meta['name']}"
        )
        kids = kids + [summarize_object("VirtualMachine", vm) for vm in vms]
    sandboxes = backend.observe(body, kids, memory.probes)
    memory.targets = {s.name: s.url for s in sandboxes if s.url and s.state != TERMINATING}
    external = spec.get("backend") == "external"
    step = plan.make_plan(
        {**spec, "reset": {}} if external else spec,
        sandboxes,
        memory.probes,
        replace_allowed=track_failures(sandboxes, memory, cfg),
        burst=cfg.create_burst,
        cap=len((spec.get("desktop") or {}).get("external", {}).get("endpoints", []))
        if external
        else None,
    )
    doomed = {s.index for s, reason in step.delete if reason == "ScaledIn"}
    live = {s.index for s in sandboxes if s.state != TERMINATING} - doomed
    jobs = service_jobs(api, body, kids, live | set(step.create), backend.uses_pods)
    jobs += workload_jobs(api, body, backend, step)
    jobs += repair_jobs(api, body, backend, kids, memory)
    await run_all(jobs, cfg.api_concurrency)
    new_status = status.compute_status(body, sandboxes, step)
    metrics.set_pool_sandboxes(
        meta["namespace"], meta["name"], status.count_states(sandboxes, step.leased)
    )
    await write_status(api, body, new_status, memory)
    await announce(api, body, step)


async def write_status(api: Kube, body: Obj, new: Obj, memory: PoolMemory) -> None:
    """Patch the status only when it changed; then post an Event per condition transition."""
    meta = body["metadata"]
    old = memory.last_status if memory.last_status is not None else body.get("status")
    if not status.status_changed(old, new):
        return
    await call(api.patch, "SandboxPool", meta["namespace"], meta["name"], {"status": new}, "status")
    before = (old or {}).get("conditions") or []
    memory.last_status = new
    for cond in conditions.transitions(before, new["conditions"]):
        warn = cond["status"] == "True" and cond["type"] in (
            conditions.DEGRADED,
            conditions.SCALING_LIMITED,
        )
        await call(events.post, api, body, cond["reason"], cond["message"], warn)


async def announce(api: Kube, body: Obj, step: plan.Plan) -> None:
    if step.create:
        await call(
            events.post, api, body, "SandboxesCreated", f"created {len(step.create)} sandboxes"
        )
    by_reason: dict[str, int] = {}
    for _sandbox, reason in step.delete:
        by_reason[reason] = by_reason.get(reason, 0) + 1
    for reason, count in sorted(by_reason.items()):
        await call(
            events.post, api, body, f"Sandboxes{reason}", f"removed {count} sandboxes ({reason})"
        )


def pool_children(body: Obj, indexes: list[kopf.Index]) -> list[Summary]:
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    return [summary for index in indexes for summary in index.get(key, [])]


async def probe_loop(key: wakeups.Key, memory: PoolMemory, want_status: Any) -> None:
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


async def run_pool_loop(body: Obj, stopped: Any, indexes: list[kopf.Index]) -> None:
    """The per-pool daemon: reconcile on events (debounced) and at least every resync period."""
    cfg = settings_mod.get()
    meta = body["metadata"]
    key: wakeups.Key = ("SandboxPool", meta["namespace"], meta["name"])
    wakeups.register(key)
    memory = PoolMemory()

    def want_status() -> bool:
        reset = body["spec"].get("reset") or {}
        return bool(reset.get("maxEpisodesPerSandbox")) or reset.get("strategy") == "recreate"

    poller = asyncio.create_task(probe_loop(key, memory, want_status))
    try:
        while not stopped:
            try:
                with metrics.timed_reconcile("SandboxPool"):
                    await reconcile_pool(body, pool_children(body, indexes), memory)
            except Exception as err:  # the next pass retries from the world's state
                log.exception("reconcile of pool %s/%s failed: %s", *key[1:], err)
            await wakeups.wait(key, cfg.resync_seconds)
            await asyncio.sleep(cfg.debounce_seconds)  # coalesce a burst of child events
    finally:
        poller.cancel()
        wakeups.forget(key)
        metrics.forget_pool(meta["namespace"], meta["name"])
