"""reconcile_pool: one level-based pass over a SandboxPool, and the per-pool loop that runs it.

A pass reads the world (kopf indexes of the pool's children, the last episode-server probes),
plans with plan.make_plan, writes the difference, then writes the whole status once if it changed
and posts Events after that write. The loop runs a pass on every child or pool event (debounced)
and at least every resync period; a prober task refreshes the probes beside it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from kubernetes.client.rest import ApiException

from kubecua_operator import conditions, events, metrics, names, statuswrite, tokens, wakeups
from kubecua_operator import settings as settings_mod
from kubecua_operator.apihealth import HEALTH
from kubecua_operator.k8s import Kube, adopt, call, controller_uid, kube
from kubecua_operator.ownership import NOT_OWNED, Issue, api_message, apply_owned, foreign
from kubecua_operator.sandboxpool import backends, children, plan, prober, status
from kubecua_operator.sandboxpool.model import (
    FAILED,
    READY,
    TERMINATING,
    Pool,
    Probe,
    RunDemand,
    Sandbox,
    Summary,
    parse_pool,
    service_shape,
    summarize_object,
    summarize_pod,
)

log = logging.getLogger(__name__)
Obj = dict[str, Any]
SLICE_SELECTOR = "endpointslice.kubernetes.io/managed-by=kubecua.dev-operator"


@dataclass
class PoolMemory:
    """What one pool's loop remembers between passes; all of it can be rebuilt from the world."""

    probes: dict[str, Probe] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # sandbox -> URL to probe
    failures: int = 0
    seen_failed: set[str] = field(default_factory=set)
    backoff_until: float = 0.0
    token: str = ""
    last_status: Obj | None = None
    taken: set[int] = field(default_factory=set)  # indexes whose names others' objects hold
    ghosts: set[str] = field(default_factory=set)  # uids the index has but the API does not
    deleted: set[str] = field(default_factory=set)  # sandboxes (uids) this pool deleted
    fetched: Obj | None = None  # the pool as read after an outage, while its watch lags
    gone: bool = False  # the pool was found deleted (or replaced) by a read
    verified_epoch: int = -1  # apihealth epoch of the last re-list
    verified_at: float = 0.0
    installed_checked_at: float = -1e9
    not_installed: tuple[str, str] | None = None  # the backend's (reason, message), if any
    issue: tuple[str, str] | None = None  # (reason, message) of the last refused write
    written: statuswrite.Written = ("", "")  # resourceVersions around the last status write
    shared_issues: list[Issue] = field(default_factory=list)  # shared children not written
    foreign_services: dict[int, str] = field(default_factory=dict)  # index -> whose Service


async def run_all(jobs: list[Any], limit: int) -> list[tuple[int, Any]]:
    """Run blocking API calls `(index, fn, *args)` concurrently, at most `limit` at a time;
    returns (index, result or exception) for each."""
    gate = asyncio.Semaphore(limit)

    async def one(job: tuple) -> Any:
        async with gate:
            return await call(*job[1:])

    # One refused write must not stop the others; the next pass retries what is still missing.
    results = await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:
        log.warning("%d of %d API writes failed; first: %s", len(errors), len(jobs), errors[0])
    return [(job[0], result) for job, result in zip(jobs, results, strict=True)]


async def ensure_shared(
    api: Kube, pool: Pool, backend: backends.Backend, memory: PoolMemory
) -> None:
    """Token Secret and the backend's shared objects (NetworkPolicy), on every pass (level-based:
    a deleted or edited one is put back). The Secret is create-only (409 when it exists): the
    operator may not read Secrets, and the token is derived, so a recreated Secret holds the same
    token."""
    if backend.uses_pods:
        memory.token = tokens.pool_token(pool.namespace, pool.name, pool.uid)
        secret = children.build_token_secret(pool.name, pool.namespace, pool.uid, memory.token)
        await call(api.create, adopt(secret, pool.body))
    issues = []
    for obj in backend.shared_objects(pool, operator_namespace(settings_mod.get())):
        issue = await call(apply_owned, api, adopt(obj, pool.body), pool.uid)
        if issue:
            issues.append(issue)
    memory.shared_issues = issues


def operator_namespace(cfg: Any) -> str:
    if cfg.namespace:
        return str(cfg.namespace)
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip()
    except OSError:
        return "kubecua-system"


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


def create_part(api: Kube, obj: Obj, pool_uid: str) -> str | Issue:
    """Create one object of a sandbox: "created", "exists", "adopted", or an Issue when the name
    is taken.

    A 409 means the name is in use by an object the indexes do not show as ours. If this pool
    controls it (e.g. someone removed its kubecua.dev/pool label), its labels are put back; if
    it lost its owner reference but still carries the pool's label and the operator's mark, the
    reference is put back: adopted, never created again in a loop. If another owner's (or
    nobody's), the Issue names it: the pool skips that index and never deletes the object."""
    if api.create(obj):
        return "created"
    meta = obj["metadata"]
    current = api.get(obj["kind"], meta["namespace"], meta["name"])
    if current is None:
        return "exists"  # deleted meanwhile; the next pass creates it
    taken = foreign(current, obj, pool_uid)
    if taken:
        return taken
    patch: Obj = {}
    if controller_uid(current) != pool_uid:  # an orphan with our marks
        patch["ownerReferences"] = [*(current["metadata"].get("ownerReferences") or []),
                                    *meta["ownerReferences"]]  # fmt: skip
    labels = current["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in meta["labels"].items()):
        patch["labels"] = meta["labels"]
    if patch:
        api.patch(obj["kind"], meta["namespace"], meta["name"], {"metadata": patch})
        return "adopted"
    return "exists"


def restore_part(api: Kube, want: Obj, pool_uid: str) -> str:
    """Put back what someone edited in a Service of this pool (selector, ports, labels: see
    service_shape): "restored", or "exists" when there is nothing to do or it is not ours."""
    meta = want["metadata"]
    current = api.get(want["kind"], meta["namespace"], meta["name"])
    if current is None or controller_uid(current) != pool_uid:
        return "exists"
    if service_shape(current) == service_shape(want):
        return "exists"  # the index was behind
    patch = children.service_restore_patch(current, want)
    api.patch(want["kind"], meta["namespace"], meta["name"], patch)
    log.warning("Service %s/%s was edited; restored", meta["namespace"], meta["name"])
    return "restored"


@functools.lru_cache(maxsize=8192)
def sandbox_service_shape(pool: str, sandbox: str, uses_pods: bool) -> str:
    """service_shape of a sandbox's Service as built (cached: every pass checks every one)."""
    return service_shape(children.build_sandbox_service(pool, "", sandbox, selector=uses_pods))


def service_jobs(
    api: Kube, body: Obj, kids: list[Summary], keep: set[int], uses_pods: bool
) -> list:
    """Create a Service for every kept sandbox index, restore one that was edited; delete
    Services of indexes that are gone."""
    meta = body["metadata"]
    pool, ns = meta["name"], meta["namespace"]
    have = {s.name: s for s in kids if s.kind == "Service" and s.sandbox}
    jobs: list = []
    for index in sorted(keep):
        name = names.sandbox_name(pool, index)
        found = have.get(name)
        if found is None:
            svc = children.build_sandbox_service(pool, ns, name, selector=uses_pods)
            jobs.append((index, create_part, api, adopt(svc, body), meta["uid"]))
        elif not found.deleting and found.shape != sandbox_service_shape(pool, name, uses_pods):
            svc = children.build_sandbox_service(pool, ns, name, selector=uses_pods)
            jobs.append((index, restore_part, api, adopt(svc, body), meta["uid"]))
    for name, found in have.items():
        idx = names.sandbox_index(pool, name)
        if idx is not None and idx not in keep and not found.deleting:
            jobs.append((idx, api.delete, "Service", ns, name, found.uid))
    return jobs


def workload_jobs(
    api: Kube, pool: Pool, backend: backends.Backend, step: plan.Plan, kids: list[Summary]
) -> list:
    cfg, ns = settings_mod.get(), pool.namespace
    jobs: list = []
    served = {s.name for s in kids if s.kind == "Service" and not s.deleting}
    for index in step.create:
        # An external sandbox's EndpointSlice adds endpoints to the Service of its name: it
        # follows on a later pass, once that Service is this pool's own (never another's).
        if not backend.uses_pods and names.sandbox_name(pool.name, index) not in served:
            continue
        for obj in backend.build(pool, index, cfg):
            jobs.append((index, create_part, api, adopt(obj, pool.body), pool.uid))
    for sandbox, _reason in step.delete:
        for i, (kind, name) in enumerate(backend.parts(sandbox.name)):
            if i == 0:  # the sandbox's main object: its uid, and the pool remembers the delete
                jobs.append((sandbox.index, delete_part, api, kind, ns, name, sandbox.uid))
            else:
                jobs.append((sandbox.index, api.delete, kind, ns, name, ""))
    return jobs


def delete_part(api: Kube, kind: str, namespace: str, name: str, uid: str) -> str:
    """Delete a sandbox's main object: "deleted" whether it was there or already gone."""
    api.delete(kind, namespace, name, uid)
    return "deleted"


def repair_jobs(
    api: Kube, pool: Pool, backend: backends.Backend, kids: list[Summary], memory: PoolMemory
) -> list:
    """The backend's fixes (backends.Repair): applied as built, or created or restored as
    children of the pool."""
    jobs = list[tuple]()
    for how, obj in backend.repairs(pool, kids, memory.probes, settings_mod.get()):
        if how == "apply":
            jobs.append((-1, api.apply, obj))
        else:
            write = create_part if how == "create" else restore_part
            jobs.append((-1, write, api, adopt(obj, pool.body), pool.uid))
    return jobs


async def list_children(api: Kube, body: Obj) -> list[Summary]:
    """The pool's children straight from the API (what the indexes hold, without their lag)."""
    meta = body["metadata"]
    ns, selector = meta["namespace"], f"{names.POOL_LABEL}={meta['name']}"
    pods, services, slices = await asyncio.gather(
        call(api.list, "Pod", ns, selector),
        call(api.list, "Service", ns, f"{selector},{names.COMPONENT_LABEL}=sandbox"),
        call(api.list, "EndpointSlice", ns, f"{selector},{SLICE_SELECTOR}"),
    )
    return (
        [summarize_pod(p) for p in pods]
        + [summarize_object("Service", s) for s in services]
        + [summarize_object("EndpointSlice", s) for s in slices]
    )


# (namespace, pool) -> when kopf last delivered a child from a list rather than a watch event
LISTED: dict[tuple[str, str], float] = {}


def child_listed(namespace: str, pool: str) -> None:
    """kopf (re)started a watch of the pool's children with a list: after a 410 Gone, e.g. when
    the API server restarted, or when a watch could not resume. Whatever was deleted before
    that list stays in kopf's index, as a ghost the pool finds only by listing itself."""
    LISTED[(namespace, pool)] = time.monotonic()


async def observed_children(
    api: Kube, body: Obj, indexed: list[Summary], memory: PoolMemory
) -> list[Summary]:
    """The pool's own children. From the indexes, except right after the API was unreachable,
    after kopf re-listed any of them, and every relist period: then from fresh lists, until the
    index holds what a list found, as the list found it (its watch has caught up). Whatever the
    index holds that a list lacks is a ghost (deleted while the watch was down) and ignored
    from then on."""
    cfg, now = settings_mod.get(), time.monotonic()
    meta = body["metadata"]
    uid = meta["uid"]
    listed_at = LISTED.get((meta["namespace"], meta["name"]), -1.0)
    if (
        memory.verified_epoch != HEALTH.epoch
        or listed_at >= memory.verified_at
        or now - memory.verified_at >= cfg.relist_seconds
    ):
        epoch = HEALTH.epoch
        listed = await list_children(api, body)
        view = compare_with_list(indexed, listed, uid, memory.ghosts)
        if view.ghosts - memory.ghosts:
            log.warning("pool %s: %d indexed children no longer exist; re-listed",
                        body["metadata"]["name"], len(view.ghosts))  # fmt: skip
        memory.ghosts = view.ghosts
        memory.taken.clear()  # a name held by a foreign object may be free again
        memory.foreign_services.clear()
        # While the index lags (a watch reconnects some time after the API answers again),
        # it lacks what this pool created meanwhile; a pass from it would count those
        # sandboxes as missing and step the status back. So list again until it caught up.
        if view.caught_up:
            memory.verified_epoch, memory.verified_at = epoch, now
        return view.children
    return [s for s in indexed if s.owner == uid and s.uid not in memory.ghosts]


@dataclass
class ListedView:
    children: list[Summary]  # the pool's own children, as listed
    ghosts: set[str]  # uids the index holds that the list lacks
    caught_up: bool  # the index holds every own child the list found, and no new ghost


def compare_with_list(
    indexed: list[Summary], listed: list[Summary], owner: str, known_ghosts: set[str]
) -> ListedView:
    """Compare an index snapshot (taken before the list) with a fresh list of the children.
    A new ghost means the index missed a deletion: its watch may still be down, so it has not
    caught up even if it holds everything listed. So does a child the index holds in another
    state than listed (say ready where the list says deleting)."""
    seen = {s.uid for s in listed}
    ghosts = {s.uid for s in indexed if s.uid not in seen}
    children = [s for s in listed if s.owner == owner]
    in_index = {s.uid: s for s in indexed if s.owner == owner}
    caught_up = ghosts <= known_ghosts and all(in_index.get(s.uid) == s for s in children)
    return ListedView(children, ghosts, caught_up)


async def not_installed(
    api: Kube, backend: backends.Backend, memory: PoolMemory
) -> tuple[str, str] | None:
    """What the cluster lacks for the backend, if anything (asked at most once a minute)."""
    if time.monotonic() - memory.installed_checked_at >= 60:
        memory.not_installed = await call(backend.not_installed, api)
        memory.installed_checked_at = time.monotonic()
    return memory.not_installed


async def current_body(api: Kube, body: Obj, memory: PoolMemory) -> Obj | None:
    """The pool as its watch last showed it, except after the API was unreachable: that watch
    lags as the children's do, so the pool is read from the API, and a spec changed meanwhile
    (a scale-in) does not wait for the watch. The newer spec (metadata.generation) wins until the
    watch has caught up. None when the pool is gone or replaced: a watch that resumed with a
    list (410 Gone) never tells of a deletion, so the loop must notice itself."""
    meta = body["metadata"]
    if memory.verified_epoch != HEALTH.epoch:
        # A list, not a get: the operator may list and watch pools, not get them.
        found = await call(
            api.list, "SandboxPool", meta["namespace"], "", f"metadata.name={meta['name']}"
        )
        fresh = found[0] if found else None
        if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
            memory.gone = True
            return None
        memory.fetched = fresh
    fetched = memory.fetched
    if fetched is not None and generation(fetched) > generation(body):
        return fetched
    memory.fetched = None
    return body


def generation(body: Obj) -> int:
    return int(body["metadata"].get("generation") or 0)


async def reconcile_pool(
    body: Obj, indexed: list[Summary], memory: PoolMemory, demands: Sequence[RunDemand] = ()
) -> None:
    """`demands`: what the TrainingRuns naming this pool ask of it (spec.sandboxes.capacity)."""
    api, cfg = kube(), settings_mod.get()
    if memory.gone:
        return  # deleted while the watch was down; a namesake gets a loop of its own
    pool = parse_pool(body)
    backend = backends.get(pool.spec.backend)
    current = await current_body(api, body, memory)
    if current is None:
        log.warning("pool %s/%s is gone", pool.namespace, pool.name)
        return
    if current is not body:  # read after an outage, with a newer spec
        pool = parse_pool(current)
    body = current
    if body["metadata"].get("deletionTimestamp"):
        await report_deletion(api, pool, backend, indexed, memory, demands)
        return
    await ensure_shared(api, pool, backend, memory)
    kids = await observed_children(api, body, indexed, memory)
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
    plan_spec, cap = backend.plan_options(pool)
    step = plan.make_plan(
        plan_spec,
        sandboxes,
        memory.probes,
        replace_allowed=track_failures(sandboxes, memory, cfg),
        burst=cfg.create_burst,
        cap=cap,
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
        pool, sandboxes, step, pool_issue(memory), created, active, cap
    )
    metrics.set_pool_sandboxes(
        pool.namespace, pool.name, status.count_states(sandboxes, step.leased)
    )
    await write_status(api, body, new_status, memory)
    await announce(api, body, created, step)


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


async def spare_fresh_leases(step: plan.Plan, memory: PoolMemory, cfg: Any) -> plan.Plan:
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


def mark_deleted(sandboxes: list[Sandbox], deleted: set[str]) -> list[Sandbox]:
    """Sandboxes this pool deleted count as terminating until the view shows them so (or gone):
    while a watch is down the index would show them ready for as long, and the status with it."""
    return [
        replace(s, state=TERMINATING) if s.uid in deleted and s.state != TERMINATING else s
        for s in sandboxes
    ]


def outcome(results: list[tuple[int, Any]], step: plan.Plan, memory: PoolMemory) -> int:
    """Sandboxes really created this pass; remembers taken indexes, the sandboxes deleted and
    the API's refusal."""
    created: set[int] = set()
    refusal = ""
    doomed = {s.index: s.uid for s, _reason in step.delete}
    for index, result in results:
        if isinstance(result, ApiException) and 400 <= (result.status or 0) < 500:
            refusal = refusal or api_message(result)
        elif isinstance(result, Issue):
            memory.taken.add(index)
            if result.kind == "Service":  # its sandbox would have no Service of the pool's
                memory.foreign_services[index] = result.message
        elif result == "created" and index in step.create:
            created.add(index)
        elif result == "deleted" and doomed.get(index):
            memory.deleted.add(doomed[index])
    memory.issue = (
        ("SandboxesRefused", f"the API server refused a sandbox: {refusal}") if refusal else None
    )
    return len(created)


def pool_issue(memory: PoolMemory) -> tuple[str, str] | None:
    """The pool-level fault its status shows (Degraded): a refused sandbox (api_message leaves
    out the object's name, so the same fault reads the same for every sandbox and the
    condition and its Event do not change from pass to pass), else a shared child or a sandbox
    Service that is someone else's, named."""
    if memory.issue:
        return memory.issue
    services = [Issue(NOT_OWNED, m) for _i, m in sorted(memory.foreign_services.items())]
    found = [*memory.shared_issues, *services]
    if not found:
        return None
    return found[0].reason, "; ".join(i.message for i in found)[:1024]


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


async def announce(api: Kube, body: Obj, created: int, step: plan.Plan) -> None:
    if created:
        await call(events.post, api, body, "SandboxesCreated", f"created {created} sandboxes")
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


def pool_demands(body: Obj, index: kopf.Index | None) -> list[RunDemand]:
    if index is None:
        return []
    return list(index.get((body["metadata"]["namespace"], body["metadata"]["name"]), []))


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


async def run_pool_loop(
    live: Any, indexes: list[kopf.Index], demands: kopf.Index | None = None
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
        return plan.recycle_after(parse_pool(live.body).spec.reset) > 0

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
