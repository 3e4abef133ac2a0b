"""kopf registrations only: each handler hands over to a reconcile function or an index summary.

Children are tracked with kopf indexes (a cache of the world, updated by watches); child events
only wake the owner's loop, which then reconciles from the indexes and its own spec.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import kopf

from kubecua_operator import metrics, names, wakeups
from kubecua_operator import settings as settings_mod
from kubecua_operator.sandboxpool import reconcile as pools
from kubecua_operator.sandboxpool.backends.external import SLICE_MANAGER
from kubecua_operator.sandboxpool.model import summarize_object, summarize_pod
from kubecua_operator.trainingrun import reconcile as runs
from kubecua_operator.trainingrun.status import summarize_job

G, V = names.GROUP, names.VERSION
POOL, RUN = names.POOL_LABEL, names.RUN_LABEL
IN_POOL: Any = {POOL: kopf.PRESENT}
SANDBOX_SERVICE: Any = {POOL: kopf.PRESENT, names.COMPONENT_LABEL: "sandbox"}
OUR_SLICES: Any = {POOL: kopf.PRESENT, "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER}
TRAINER_JOB: Any = {RUN: kopf.PRESENT, names.COMPONENT_LABEL: "trainer"}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings_mod.configure_kopf(settings)
    cfg = settings_mod.get()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=cfg.api_concurrency + 8)
    asyncio.get_running_loop().set_default_executor(executor)
    metrics.start_server(cfg.metrics_port, cfg.metrics_host)


@kopf.index("pods", labels=IN_POOL)
async def sandbox_pods(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][POOL]): summarize_pod(dict(kw["body"]))}


@kopf.index("services", labels=SANDBOX_SERVICE)
async def sandbox_services(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][POOL]): summarize_object("Service", dict(kw["body"]))}


@kopf.index("discovery.k8s.io", "v1", "endpointslices", labels=OUR_SLICES)
async def sandbox_slices(**kw: Any) -> dict:
    body = dict(kw["body"])
    return {(kw["namespace"], kw["labels"][POOL]): summarize_object("EndpointSlice", body)}


@kopf.on.event("pods", labels=IN_POOL)
@kopf.on.event("services", labels=SANDBOX_SERVICE)
@kopf.on.event("discovery.k8s.io", "v1", "endpointslices", labels=OUR_SLICES)
async def wake_pool(**kw: Any) -> None:
    wakeups.signal("SandboxPool", kw["namespace"], kw["labels"][POOL])


@kopf.daemon(G, V, "sandboxpools", cancellation_timeout=2)
async def pool_daemon(**kw: Any) -> None:
    indexes = [kw["sandbox_pods"], kw["sandbox_services"], kw["sandbox_slices"]]
    await pools.run_pool_loop(kw["body"], kw["stopped"], indexes)


@kopf.index(G, V, "sandboxpools")
async def pool_readiness(**kw: Any) -> dict:
    return {(kw["namespace"], kw["name"]): int(kw["status"].get("readyReplicas") or 0)}


@kopf.index(G, V, "trainingruns")
async def runs_by_pool(**kw: Any) -> dict | None:
    pool = (kw["spec"].get("sandboxes") or {}).get("poolRef")
    return {(kw["namespace"], pool): kw["name"]} if pool else None


@kopf.on.event(G, V, "sandboxpools")
async def wake_pool_and_runs(**kw: Any) -> None:
    namespace, name = kw["namespace"], kw["name"]
    wakeups.signal("SandboxPool", namespace, name)
    for run in kw["runs_by_pool"].get((namespace, name), []):
        wakeups.signal("TrainingRun", namespace, run)


@kopf.index("batch", "v1", "jobs", labels=TRAINER_JOB)
async def trainer_jobs(**kw: Any) -> dict:
    return {(kw["namespace"], kw["labels"][RUN]): summarize_job(dict(kw["body"]))}


@kopf.on.event("batch", "v1", "jobs", labels=TRAINER_JOB)
@kopf.on.event(G, V, "trainingruns")
async def wake_run(**kw: Any) -> None:
    wakeups.signal("TrainingRun", kw["namespace"], kw["labels"].get(RUN, kw["name"]))


@kopf.daemon(G, V, "trainingruns", cancellation_timeout=2)
async def run_daemon(**kw: Any) -> None:
    await runs.run_loop(kw["body"], kw["stopped"], kw["trainer_jobs"], kw["pool_readiness"])
