"""kopf registrations only: each handler hands over to a reconcile loop or an index summary.

Children are tracked with kopf indexes (a cache of the world, updated by watches); child events
only wake the owner's loop, which then reconciles from the indexes and its own spec. Pools and runs
get their loops from watch events (loops.py), not kopf daemons, so kopf adds no finalizer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import kopf

from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator import loops, metrics, names, wakeups, watches
from kubecua_operator import settings as settings_mod
from kubecua_operator.apihealth import HEALTH
from kubecua_operator.parsed import parse_or_none
from kubecua_operator.sandboxpool import backends
from kubecua_operator.sandboxpool import loop as pools
from kubecua_operator.sandboxpool import view as pool_view
from kubecua_operator.sandboxpool.backends.external import SLICE_MANAGER
from kubecua_operator.sandboxpool.model import summarize_object, summarize_pod, summarize_run_demand
from kubecua_operator.taskverification import reconcile as verifications
from kubecua_operator.trainingrun import reconcile as runs
from kubecua_operator.trainingrun.model import bound_pool
from kubecua_operator.trainingrun.status import summarize_job, summarize_trainer_pod

G, V = names.GROUP, names.VERSION
POOL, RUN = names.POOL_LABEL, names.RUN_LABEL
IN_POOL: Any = {POOL: kopf.PRESENT}
OUR_SLICES: Any = {POOL: kopf.PRESENT, "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER}
TRAINER_JOB: Any = {RUN: kopf.PRESENT, names.COMPONENT_LABEL: "trainer"}  # Jobs and their pods
VERIFIER_JOB: Any = {names.VERIFICATION_LABEL: kopf.PRESENT, names.COMPONENT_LABEL: "verifier"}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings_mod.configure_kopf(settings)
    cfg = settings_mod.get()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=cfg.api_concurrency + 8)
    asyncio.get_running_loop().set_default_executor(executor)
    metrics.start_server(cfg.metrics_port, cfg.metrics_host)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await POOL_LOOPS.stop_all()
    await RUN_LOOPS.stop_all()
    await VERIFICATION_LOOPS.stop_all()


@kopf.on.probe(id="apiReachable")
async def api_reachable(**_: Any) -> float:
    """Liveness: fails once the API has been unreachable longer than api_grace_seconds (the
    indexes then cannot be trusted; a restart re-lists everything), or once RBAC has denied
    every request for as long (the operator cannot do its job: its statuses go stale)."""
    down, denied = HEALTH.unreachable_for(), HEALTH.denied_for()
    grace = settings_mod.get().api_grace_seconds
    if down > grace:
        raise kopf.PermanentError(f"Kubernetes API unreachable for {down:.0f}s")
    if denied > grace:
        raise kopf.PermanentError(f"RBAC has denied the operator's requests for {denied:.0f}s")
    return round(down, 1)


@kopf.on.probe(id="watchesUp")
async def watches_up(**_: Any) -> int:
    """Liveness: fails while any watch stream is down (watches.py lists and watches it again
    with a backoff; if it never comes back, the kubelet restarts the operator)."""
    down = watches.probe_message()
    if down:
        raise kopf.PermanentError(down)
    return len(watches.WATCHES.streams)


@kopf.index("pods", labels=IN_POOL)
async def sandbox_pods(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][POOL]): summarize_pod(dict(kw["body"]))}


# Every Service labelled for a pool, not only its sandboxes': one it did not make is a foreign
# member, which the pool reports (trainers ignore it: trainer/kubecua_trainer/sources/kube.py).
@kopf.index("services", labels=IN_POOL)
async def sandbox_services(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][POOL]): summarize_object("Service", dict(kw["body"]))}


@kopf.index("discovery.k8s.io", "v1", "endpointslices", labels=OUR_SLICES)
async def sandbox_slices(**kw: Any) -> dict:
    body = dict(kw["body"])
    return {(kw["namespace"], kw["labels"][POOL]): summarize_object("EndpointSlice", body)}


@kopf.on.event("pods", labels=IN_POOL)
@kopf.on.event("services", labels=IN_POOL)
@kopf.on.event("discovery.k8s.io", "v1", "endpointslices", labels=OUR_SLICES)
async def wake_pool(**kw: Any) -> None:
    key = (kw["namespace"], kw["labels"][POOL])
    if kw["type"] is None and key in POOL_LOOPS.live:  # from a list: the index may hold ghosts
        pool_view.child_listed(*key)
    wakeups.signal("SandboxPool", kw["namespace"], kw["labels"][POOL])


_INDEXES: dict[str, Any] = {}  # kopf's index objects, live views handed to every handler


def _pool_loop(live: loops.Live) -> Any:
    names_ = ("sandbox_pods", "sandbox_services", "sandbox_slices")
    return pools.run_pool_loop(live, [_INDEXES[n] for n in names_], _INDEXES["run_demand"])


def _run_loop(live: loops.Live) -> Any:
    return runs.run_loop(
        live, _INDEXES["trainer_jobs"], _INDEXES["pool_readiness"], _INDEXES["trainer_pods"]
    )


def _verification_loop(live: loops.Live) -> Any:
    return verifications.verification_loop(
        live, _INDEXES["verifier_jobs"], _INDEXES["pool_readiness"]
    )


POOL_LOOPS = loops.Loops(_pool_loop, while_deleting=True)
RUN_LOOPS = loops.Loops(_run_loop)
VERIFICATION_LOOPS = loops.Loops(_verification_loop)


def _keep_indexes(kw: dict[str, Any]) -> None:
    for name in ("sandbox_pods", "sandbox_services", "sandbox_slices", "trainer_jobs",
                 "pool_readiness", "trainer_pods", "run_demand", "verifier_jobs"):  # fmt: skip
        _INDEXES[name] = kw[name]


@kopf.index(G, V, "sandboxpools")
async def pool_readiness(**kw: Any) -> dict | None:
    """Per pool, for its runs: ready sandboxes, its token Secret's name (its backend's) and
    DemandMet. None for a spec that does not parse: its runs see no pool."""
    pool = parse_or_none(dict(kw["body"]), SandboxPoolSpec)
    if pool is None:
        return None
    secret = backends.get(pool.spec.backend).token_secret(pool.name, pool.uid)
    return {(pool.namespace, pool.name): bound_pool(dict(kw["status"]), secret, pool.uid)}


@kopf.index(G, V, "trainingruns")
async def run_demand(**kw: Any) -> dict | None:
    """Per pool: what each run naming it asks for (spec.sandboxes.capacity). A spec that does not
    parse asks nothing: its loop fails the run, naming the field."""
    run = parse_or_none(dict(kw["body"]), TrainingRunSpec)
    demand = summarize_run_demand(run) if run else None
    return {(run.namespace, run.spec.sandboxes.pool_ref): demand} if run and demand else None


@kopf.index(G, V, "trainingruns")
async def runs_by_pool(**kw: Any) -> dict | None:
    run = parse_or_none(dict(kw["body"]), TrainingRunSpec)
    pool = run.spec.sandboxes.pool_ref if run else None
    return {(kw["namespace"], pool): kw["name"]} if pool else None


@kopf.on.event(G, V, "sandboxpools")
async def wake_pool_and_runs(**kw: Any) -> None:
    namespace, name = kw["namespace"], kw["name"]
    _keep_indexes(kw)
    POOL_LOOPS.observe(kw["type"], dict(kw["body"]))
    wakeups.signal("SandboxPool", namespace, name)
    for run in kw["runs_by_pool"].get((namespace, name), []):
        wakeups.signal("TrainingRun", namespace, run)
    for verification in kw["verifications_by_pool"].get((namespace, name), []):
        wakeups.signal("TaskVerification", namespace, verification)


@kopf.index("batch", "v1", "jobs", labels=TRAINER_JOB)
async def trainer_jobs(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][RUN]): summarize_job(dict(kw["body"]))}


@kopf.index("pods", labels=TRAINER_JOB)
async def trainer_pods(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][RUN]): summarize_trainer_pod(dict(kw["body"]))}


@kopf.on.event("batch", "v1", "jobs", labels=TRAINER_JOB)
@kopf.on.event("pods", labels=TRAINER_JOB)
async def wake_run(**kw: Any) -> None:
    wakeups.signal("TrainingRun", kw["namespace"], kw["labels"][RUN])


@kopf.on.event(G, V, "trainingruns")
async def run_event(**kw: Any) -> None:
    _keep_indexes(kw)
    run = parse_or_none(dict(kw["body"]), TrainingRunSpec)
    pool = run.spec.sandboxes.pool_ref if run else None
    if pool:  # its demand may have changed: started, suspended, finished, deleted
        wakeups.signal("SandboxPool", kw["namespace"], pool)
    RUN_LOOPS.observe(kw["type"], dict(kw["body"]))
    wakeups.signal("TrainingRun", kw["namespace"], kw["name"])


# TaskVerification: one loop each (taskverification/reconcile.py), woken by its Job and its pool.
@kopf.index("batch", "v1", "jobs", labels=VERIFIER_JOB)
async def verifier_jobs(**kw: Any) -> dict:
    key = (kw["namespace"], kw["labels"][names.VERIFICATION_LABEL])
    return {key: summarize_job(dict(kw["body"]))}


@kopf.index(G, V, "taskverifications")
async def verifications_by_pool(**kw: Any) -> dict | None:
    pool = (kw["spec"] or {}).get("poolRef")  # only a wake-up: the loop parses the spec
    return {(kw["namespace"], pool): kw["name"]} if isinstance(pool, str) and pool else None


@kopf.on.event("batch", "v1", "jobs", labels=VERIFIER_JOB)
async def wake_verification(**kw: Any) -> None:
    wakeups.signal("TaskVerification", kw["namespace"], kw["labels"][names.VERIFICATION_LABEL])


@kopf.on.event(G, V, "taskverifications")
async def verification_event(**kw: Any) -> None:
    _keep_indexes(kw)
    VERIFICATION_LOOPS.observe(kw["type"], dict(kw["body"]))
    wakeups.signal("TaskVerification", kw["namespace"], kw["name"])
