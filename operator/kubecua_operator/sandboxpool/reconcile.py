"""reconcile_pool: one level-based pass over a SandboxPool.

A pass reads the world (view.py: kopf indexes of the pool's children, or fresh lists; the last
episode-server probes), plans with plan.make_plan, writes the difference (writes.py), then writes
the whole status once if it changed and posts Events after that write. What it remembers between
passes is memory.py's; the loop that runs it is loop.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kubecua_api.errors import InvalidSpec
from kubecua_operator import conditions, events, metrics, statuswrite
from kubecua_operator import settings as settings_mod
from kubecua_operator.k8s import Kube, call, kube
from kubecua_operator.sandboxpool import backends, plan, prober, status
from kubecua_operator.sandboxpool.memory import (
    PoolMemory,
    mark_deleted,
    members_issue,
    outcome,
    pool_issue,
    track_failures,
)
from kubecua_operator.sandboxpool.model import (
    READY,
    TERMINATING,
    Pool,
    Probe,
    RunDemand,
    Summary,
    parse_pool,
)
from kubecua_operator.sandboxpool.view import (
    current_body,
    foreign_members,
    not_installed,
    observed_children,
)
from kubecua_operator.sandboxpool.writes import (
    ensure_shared,
    repair_jobs,
    run_all,
    service_jobs,
    workload_jobs,
)
from kubecua_operator.settings import Settings

log = logging.getLogger(__name__)
Obj = dict[str, Any]


async def reconcile_pool(
    body: Obj, indexed: list[Summary], memory: PoolMemory, demands: Sequence[RunDemand] = ()
) -> None:
    """`demands`: what the TrainingRuns naming this pool ask of it (spec.sandboxes.capacity)."""
    api, cfg = kube(), settings_mod.get()
    if memory.gone:
        return  # deleted while the watch was down; a namesake gets a loop of its own
    current = await current_body(api, body, memory)  # newer after an outage
    if current is None:
        log.warning("pool %s/%s is gone", body["metadata"]["namespace"], body["metadata"]["name"])
        return
    body = current
    try:
        pool = parse_pool(body)
    except InvalidSpec as err:  # stored under an older schema: name the fields, build nothing
        await write_status(api, body, status.invalid_status(body, str(err)), memory)
        return
    backend = backends.get(pool.spec.backend)
    if body["metadata"].get("deletionTimestamp"):
        await report_deletion(api, pool, backend, indexed, memory, demands)
        return
    await ensure_shared(api, pool, backend, memory)
    kids = await observed_children(api, body, indexed, memory)
    memory.foreign_members = foreign_members(indexed, pool.uid, memory.ghosts)
    missing = await not_installed(api, backend, memory)
    if missing:
        await write_status(api, body, status.compute_status(
            pool, [], plan.Plan(target=pool.spec.replicas), missing
        ), memory)  # fmt: skip
        return
    kids += await call(backend.extra_children, api, pool)
    memory.deleted &= {k.uid for k in kids}  # forget deletes the view has seen through
    sandboxes = mark_deleted(backend.observe(pool, kids, memory.probes), memory.deleted)
    memory.targets = {s.name: s.url for s in sandboxes if s.url and s.state != TERMINATING}
    active = [d for d in demands if d.active]
    options = plan.plan_options(pool.spec, backend.recycles, backend.cap(pool))
    step = plan.make_plan(
        pool.spec,
        sandboxes,
        memory.probes,
        replace_allowed=track_failures(sandboxes, memory, cfg),
        burst=cfg.create_burst,
        options=options,
        taken=memory.taken,
        demand=sum(d.sandboxes for d in active),
    )
    step = await spare_fresh_leases(step, memory, cfg)
    doomed = {s.index for s, reason in step.delete if reason == "ScaledIn"}
    live = {s.index for s in sandboxes if s.state != TERMINATING} - doomed
    # A new sandbox's Service follows on the next pass, once its workload exists: a name that
    # turns out to be taken (another owner's pod) never gets a Service selecting that pod.
    keep = live if backend.uses_pods else live | set(step.create)
    jobs = service_jobs(api, body, kids, keep, backend.uses_pods)
    jobs += workload_jobs(api, pool, backend, step, kids)
    jobs += repair_jobs(api, pool, backend, kids, memory)
    results = await run_all(jobs, cfg.api_concurrency)
    created = outcome(results, step, memory)
    # What this pass deleted is no longer ready, whatever the view (taken before) said.
    sandboxes = mark_deleted(sandboxes, memory.deleted)
    new_status = status.compute_status(
        pool, sandboxes, step, pool_issue(memory), created, active, options.cap
    )
    metrics.set_pool_sandboxes(
        pool.namespace, pool.name, status.count_states(sandboxes, step.leased)
    )
    await write_status(api, body, new_status, memory)
    await announce(api, body, created, step, memory.foreign_members)


async def report_deletion(
    api: Kube,
    pool: Pool,
    backend: backends.Backend,
    indexed: list[Summary],
    memory: PoolMemory,
    demands: Sequence[RunDemand],
) -> None:
    """The pass of a pool being deleted (a finalizer holds it): only its status is written,
    saying so, with the sandboxes counted as they are. Nothing is created, repaired or
    replaced: the children go with the pool, and a sandbox made now would only be removed."""
    kids = await observed_children(api, pool.body, indexed, memory)
    if not await not_installed(api, backend, memory):  # else there is nothing more to list
        kids += await call(backend.extra_children, api, pool)
    sandboxes = mark_deleted(backend.observe(pool, kids, memory.probes), memory.deleted)
    memory.targets = {s.name: s.url for s in sandboxes if s.url and s.state != TERMINATING}
    leased = sum(s.state == READY and _is_busy(memory.probes.get(s.name)) for s in sandboxes)
    active = [d for d in demands if d.active]
    new_status = status.deleting_status(pool, sandboxes, leased, active)
    metrics.set_pool_sandboxes(pool.namespace, pool.name, status.count_states(sandboxes, leased))
    await write_status(api, pool.body, new_status, memory)


def _is_busy(probe: Probe | None) -> bool:
    return bool(probe and probe.busy)


async def spare_fresh_leases(step: plan.Plan, memory: PoolMemory, cfg: Settings) -> plan.Plan:
    """Ask the ready sandboxes chosen for scale-in again, just before they go, and keep those
    that are busy now. The plan saw probes up to a poll period old, and an HPA (or a finished
    run) may lower the target right after an episode began there: removing that sandbox would
    end a leased episode. A sandbox that does not answer goes as before (kwok pods run no
    episode server); the spared ones count as leased, and the next pass picks others."""
    chosen = {
        s.name: memory.targets[s.name]
        for s, reason in step.delete
        if reason == "ScaledIn" and s.state == READY and s.name in memory.targets
    }
    if not (chosen and cfg.poll_episodes):
        return step
    fresh = await prober.probe_all(
        chosen, memory.token, False, cfg.poll_timeout_seconds, cfg.poll_concurrency
    )
    busy = {name for name, probe in fresh.items() if probe.busy}
    if not busy:
        return step
    log.info("scale-in spares %s: an episode began there since the last poll", sorted(busy))
    memory.probes = {**memory.probes, **{n: _busy_probe(memory.probes.get(n)) for n in busy}}
    kept = [(s, reason) for s, reason in step.delete if s.name not in busy]
    return replace(step, delete=kept, leased=step.leased + len(busy))


def _busy_probe(old: Probe | None) -> Probe:
    return Probe(True, True) if old is None else replace(old, ready=True, busy=True)


async def write_status(api: Kube, body: Obj, new: Obj, memory: PoolMemory) -> None:
    """Patch the status only when it changed; then post an Event per condition transition."""
    meta = body["metadata"]
    old = statuswrite.baseline(body, memory.last_status, memory.written)
    if not status.status_changed(old, new):
        return
    reply = await call(
        api.patch, "SandboxPool", meta["namespace"], meta["name"], {"status": new}, "status"
    )
    before = (old or {}).get("conditions") or []
    memory.last_status, memory.written = new, statuswrite.written_by(body, reply)
    for cond in conditions.transitions(before, new["conditions"]):
        warn = cond["status"] == "True" and cond["type"] in (
            conditions.DEGRADED,
            conditions.SCALING_LIMITED,
        )
        warn |= cond["status"] == "False" and cond["type"] == conditions.DEMAND_MET
        await call(events.post, api, body, cond["reason"], cond["message"], warn)


async def announce(
    api: Kube, body: Obj, created: int, step: plan.Plan, foreign: list[str] | None = None
) -> None:
    if foreign:  # also while Degraded stays True for another reason (events.post dedupes)
        issue = members_issue(foreign)
        await call(events.post, api, body, issue.reason, issue.message, True)
    if created:
        await call(events.post, api, body, "SandboxesCreated", f"created {created} sandboxes")
    by_reason: dict[str, int] = {}
    for _sandbox, reason in step.delete:
        by_reason[reason] = by_reason.get(reason, 0) + 1
    for reason, count in sorted(by_reason.items()):
        await call(
            events.post, api, body, f"Sandboxes{reason}", f"removed {count} sandboxes ({reason})"
        )
