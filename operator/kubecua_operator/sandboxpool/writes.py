"""What a pass writes: the pool's shared children, each sandbox's Service and workload objects,
deletions and the backend's repairs, as jobs run concurrently (`run_all`). A write never takes
over an object that is not the pool's own (create_part reports it as an Issue instead).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from kubecua_operator import names, tokens
from kubecua_operator import settings as settings_mod
from kubecua_operator.k8s import Kube, adopt, call, controller_uid
from kubecua_operator.ownership import Issue, apply_owned, foreign
from kubecua_operator.sandboxpool import backends, children, plan
from kubecua_operator.sandboxpool.memory import PoolMemory
from kubecua_operator.sandboxpool.model import Pool, Summary, service_shape
from kubecua_operator.settings import Settings

log = logging.getLogger(__name__)
Obj = dict[str, Any]


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


def operator_namespace(cfg: Settings) -> str:
    if cfg.namespace:
        return str(cfg.namespace)
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip()
    except OSError:
        return "kubecua-system"


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
