"""reconcile_verification: one level-based pass over a TaskVerification, and its loop.

Steps: (0) a finished verification is left as it is; (1) parse the spec (one that does not parse
fails it, naming the field); (2) make sure the ServiceAccount, Role, RoleBinding and the empty
manifest ConfigMap exist, writing none that is someone else's (ownership.py); (3) create the Job
once the pool has a ready sandbox and every child is the verification's own; (4) once the Job
completed, read the manifest from the ConfigMap, or once it failed, its pod's last words; (5)
write the status if it changed, then post an Event on a phase change.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

import kopf

from kubecua_api.errors import InvalidSpec
from kubecua_api.taskverification import TASKVERIFICATION_KIND, TaskVerificationSpec
from kubecua_operator import conditions, events, metrics, statuswrite, wakeups
from kubecua_operator import settings as settings_mod
from kubecua_operator.k8s import Kube, adopt, call, kube
from kubecua_operator.ownership import Issue, apply_owned, create_owned
from kubecua_operator.parsed import parse
from kubecua_operator.taskverification import children, status
from kubecua_operator.taskverification.children import Verification
from kubecua_operator.trainingrun.model import BoundPool
from kubecua_operator.trainingrun.status import JobView

log = logging.getLogger(__name__)
Obj = dict[str, Any]
GRANTS = ("Role", "RoleBinding")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's label on its pods


@dataclass
class Memory:
    last_status: Obj | None = None
    written: statuswrite.Written = ("", "")


def job_of(body: Obj, jobs: kopf.Index) -> JobView | None:
    meta = body["metadata"]
    found = list(jobs.get((meta["namespace"], meta["name"]), []))
    return found[0] if found else None


def pool_of(v: Verification, pools: kopf.Index) -> BoundPool | None:
    found: list[BoundPool] = list(pools.get((v.namespace, v.spec.pool_ref), []))
    return found[0] if found else None


async def ensure_static(api: Kube, v: Verification) -> list[Issue]:
    """The account, its grants and the empty manifest ConfigMap; what is someone else's, or
    refused, is returned instead. No grant while a child is someone else's (the RoleBinding
    would hand the verifier's rights to their account)."""
    issues: list[Issue] = []
    for obj in (children.build_service_account(v), children.build_role(v),
                children.build_role_binding(v)):  # fmt: skip
        if issues and obj["kind"] in GRANTS:
            continue
        issue = await call(apply_owned, api, adopt(obj, v.body), v.uid)
        if issue:
            issues.append(issue)
    cm = adopt(children.build_manifest_config_map(v), v.body)
    issue = await call(create_owned, api, cm, v.uid)
    return issues + ([issue] if issue else [])


async def last_words(api: Kube, v: Verification, job: JobView) -> str:
    """The newest failed verifier pod's termination message (FallbackToLogsOnError: its last
    log lines when it wrote none), at most 1024 characters."""
    pods = await call(api.list, "Pod", v.namespace, f"{JOB_NAME_LABEL}={job.name}")
    words = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp", ""))):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            done = (cs.get("state") or {}).get("terminated") or {}
            if done.get("exitCode"):
                words.append(f"exit {done['exitCode']}: {str(done.get('message') or '').strip()}")
    return words[-1][-1024:] if words else ""


async def observe(api: Kube, v: Verification, jobs: kopf.Index, pools: kopf.Index) -> Any:
    job, pool = job_of(v.body, jobs), pool_of(v, pools)
    seen = status.Observed(job, pool)
    issues = await ensure_static(api, v)
    if job is None and not issues and pool is not None and pool.ready >= 1:
        body = children.build_job(v, settings_mod.get(), pool.token_secret)
        late = await call(create_owned, api, adopt(body, v.body), v.uid)
        issues += [late] if late else []
    seen = replace(seen, issues=tuple(issues))
    if job is not None and job.complete:
        name = children.manifest_name(v.name)
        found = await call(api.get, "ConfigMap", v.namespace, name)
        manifest, problem = status.read_manifest(found, name)
        seen = replace(seen, manifest=manifest, manifest_problem=problem)
    elif job is not None and job.failed_reason:
        seen = replace(seen, last_words=await last_words(api, v, job))
    return seen


async def reconcile_verification(
    body: Obj, jobs: kopf.Index, pools: kopf.Index, memory: Memory
) -> None:
    api = kube()
    old = statuswrite.baseline(body, memory.last_status, memory.written)
    if (old or {}).get("phase") in status.TERMINAL:
        return  # finished: its Job may be deleted, its status stays
    pool_ref = ""
    try:
        v = parse(body, TaskVerificationSpec)
    except InvalidSpec as err:
        seen = status.Observed(job_of(body, jobs), invalid=str(err))
    else:
        pool_ref = v.spec.pool_ref
        seen = await observe(api, v, jobs, pools)
    new = status.compute_status(body, pool_ref, seen, conditions.now_iso())
    if not status.changed(old, new):
        return
    meta = body["metadata"]
    reply = await call(
        api.patch, TASKVERIFICATION_KIND, meta["namespace"], meta["name"], {"status": new}, "status"
    )
    memory.last_status, memory.written = new, statuswrite.written_by(body, reply)
    if (old or {}).get("phase") != new["phase"]:
        failed = conditions.find(new["conditions"], conditions.FAILED) or {}
        message = failed.get("message") or f"phase {new['phase']}"
        await call(events.post, api, body, new["phase"], message, new["phase"] == status.FAILED)


async def verification_loop(live: Any, jobs: kopf.Index, pools: kopf.Index) -> None:
    """The per-object loop; `live.body` is the TaskVerification as last seen by the watch."""
    cfg, meta = settings_mod.get(), live.body["metadata"]
    key: wakeups.Key = (TASKVERIFICATION_KIND, meta["namespace"], meta["name"])
    wakeups.register(key)
    memory = Memory()
    try:
        while not live.stopped:
            try:
                with metrics.timed_reconcile(TASKVERIFICATION_KIND):
                    await reconcile_verification(live.body, jobs, pools, memory)
            except Exception as err:  # the next pass retries from the world's state
                log.exception("reconcile of verification %s/%s failed: %s", *key[1:], err)
            await wakeups.wait(key, cfg.resync_seconds)
            await asyncio.sleep(cfg.debounce_seconds)
    finally:
        wakeups.forget(key)
