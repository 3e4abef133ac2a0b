"""reconcile_run: one level-based pass over a TrainingRun, and the per-run loop that runs it.

Steps: (0) parse the spec once (kubecua_api's TrainingRunSpec; a spec that does not parse fails
the run, naming the field); (1) refuse specs that cannot run in a cluster; (2) make sure the
static children exist and match the spec (every pass: a deleted or edited child is put back),
writing none that is someone else's (ownership.py); (3) read the pool's readiness and the trainer
Job from kopf indexes; (4) create the Job once minReady sandboxes are ready and every child is
the run's own, and keep its suspend in line with the spec; (5) write the operator-owned status if
it changed, then post an Event on a phase change and one when the run turns Degraded. A child
the API refuses, or one that is not the run's, is a Degraded condition naming it: the rest of the
status is computed all the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from kubecua_api.errors import InvalidSpec
from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator import conditions, events, metrics, statuswrite, wakeups
from kubecua_operator import settings as settings_mod
from kubecua_operator.k8s import Kube, adopt, call, kube
from kubecua_operator.ownership import Issue, apply_owned, create_owned
from kubecua_operator.trainingrun import children, job, model, status
from kubecua_operator.trainingrun.model import BoundPool, Run

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = (status.SUCCEEDED, status.FAILED)
GRANTS = ("Role", "RoleBinding")
POD_NAME = re.compile(r'pods? "[^"]*" ')


@dataclass
class RunMemory:
    has_pod_monitors: bool | None = None
    last_status: Obj | None = None
    written: statuswrite.Written = ("", "")  # resourceVersions around the last status write


def static_children(run: Run, with_pod_monitor: bool) -> list[Obj]:
    objs = [
        children.build_network_policy(run),
        children.build_config_map(run),
        children.build_service_account(run),
        children.build_role(run),
        children.build_role_binding(run),
        children.build_rendezvous_service(run),
    ]
    if run.spec.metrics.port:
        objs.append(children.build_metrics_service(run))
        if with_pod_monitor:
            objs.append(children.build_pod_monitor(run))
    if children.runs_sglang(run.spec):
        objs += children.build_sglang(run, settings_mod.get())
    return objs


async def ensure_static(api: Kube, run: Run, memory: RunMemory) -> list[Issue]:
    """Create or correct every static child that is the run's own (apply writes only what
    differs); what is someone else's, or refused, is returned instead."""
    if memory.has_pod_monitors is None:
        memory.has_pod_monitors = await call(
            api.has_resource, "monitoring.coreos.com/v1", "podmonitors"
        )
    issues: list[Issue] = []
    for obj in static_children(run, bool(memory.has_pod_monitors)):
        # No grant while a child is someone else's: the RoleBinding would hand the trainer's
        # rights to their account, the Role a read of their ConfigMap.
        if issues and obj["kind"] in GRANTS:
            continue
        issue = await call(apply_owned, api, adopt(obj, run.body), run.uid)
        if issue:
            issues.append(issue)
    return issues


def invalid_reason(spec: TrainingRunSpec) -> str:
    if spec.sandboxes.local is not None:
        return "spec.sandboxes.local starts desktops on the trainer's machine: local mode only"
    return children.sglang_volume_problem(spec)


def job_of(body: Obj, jobs: kopf.Index) -> status.JobView | None:
    found = list(jobs.get((body["metadata"]["namespace"], body["metadata"]["name"]), []))
    return found[0] if found else None


def observe(
    run: Run, jobs: kopf.Index, pools: kopf.Index, trainer_pods: Any = None
) -> status.Observed:
    spec, key, found = run.spec, (run.namespace, run.name), job_of(run.body, jobs)
    pods = tuple(trainer_pods.get(key, [])) if trainer_pods is not None else ()
    pool = spec.sandboxes.pool_ref
    if not pool:
        return status.Observed(found, None, invalid=invalid_reason(spec), pods=pods)
    entries: list[BoundPool] = list(pools.get((run.namespace, pool), []))
    bound = entries[0] if entries else None
    return status.Observed(
        job=found,
        ready_sandboxes=bound.ready if bound else 0,
        pool_found=bound is not None,
        invalid=invalid_reason(spec),
        pool_token=bound.token_secret if bound else None,
        pool_uid=bound.uid if bound else "",
        pods=pods,
        pool_demand=bound.demand_met if bound else None,
    )


async def read_admission(api: Kube, run: Run, seen: status.Observed) -> status.Admission | None:
    """The Workload Kueue made for this run's Job (labelled with the Job's uid), if any."""
    if not run.spec.kueue.queue_name or seen.job is None or not seen.job.uid:
        return None
    selector = f"kueue.x-k8s.io/job-uid={seen.job.uid}"
    try:
        found = await call(api.list, "Workload", run.namespace, selector)
    except ApiException as err:
        if err.status == 404:  # Kueue is not installed: the Job just stays suspended
            return None
        raise
    return status.summarize_workload(found[0]) if found else None


async def drive_job(api: Kube, run: Run, seen: status.Observed) -> Issue | None:
    """Create the Job when sandboxes allow; keep Job.spec.suspend equal to spec.suspend.
    Under Kueue the Job is created suspended and Kueue unsuspends it on admission; spec.suspend
    then deactivates the Workload (spec.active), since Kueue would unsuspend a Job whose Workload
    is still admitted, and Kueue suspends the Job itself as it evicts."""
    spec = run.spec
    suspend, kueue = spec.suspend, bool(spec.kueue.queue_name)
    old_phase = (run.body.get("status") or {}).get("phase")
    if seen.job is None:
        gate = conditions.is_true(
            [status.sandboxes_condition(spec, seen, 0)], conditions.SANDBOXES_READY
        )
        # Not while a child is someone else's: the Job would mount its ConfigMap, run as its
        # account (the admission guard would refuse it; without the guard nothing would).
        ready = gate and not seen.invalid and not seen.issues
        if ready and old_phase not in TERMINAL and not (kueue and suspend):
            body = job.build_job(
                run, settings_mod.get(), suspend or kueue, seen.pool_token, seen.pool_uid
            )
            return await call(create_owned, api, adopt(body, run.body), run.uid)
        return None
    if seen.job.complete:
        return None
    if kueue:
        queued = seen.admission
        if queued and queued.active == suspend:
            patch = {"spec": {"active": not suspend}}
            await call(api.patch, "Workload", run.namespace, queued.workload, patch)
        return None
    if seen.job.suspend != suspend:
        patch = {"spec": {"suspend": suspend}}
        await call(api.patch, "Job", run.namespace, seen.job.name, patch)
    return None


async def pod_refusal(api: Kube, run: Run, seen: status.Observed) -> Issue | None:
    """Why the Job controller cannot make the trainer's pods (its FailedCreate Event: a pod the
    API server or the admission guard refuses), asked only while the Job should have pods and
    has none."""
    found = seen.job
    if found is None or found.complete or found.suspend or found.active or seen.pods:
        return None
    if not found.uid or found.failed_reason:
        return None
    fields = f"involvedObject.uid={found.uid},reason=FailedCreate"
    events_ = await call(api.list, "Event", run.namespace, "", fields)
    if not events_:
        return None
    last = max(events_, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    # Without the pod's generated name, a retry reads the same (one condition, one Event).
    message = POD_NAME.sub("pod ", str(last.get("message", "")))
    return Issue(status.PODS_REFUSED, f"Job {found.name} cannot create its pods: {message}")


def report_demand(body: Obj, spec: TrainingRunSpec | None, finished: bool) -> None:
    """Feed kubecua_pool_min_ready: an unfinished run asks its pool for minReady sandboxes."""
    meta, asks = body["metadata"], spec.sandboxes if spec and not finished else None
    pool, need = (asks.pool_ref, asks.min_ready) if asks else (None, None)
    metrics.set_run_demand(meta["namespace"], meta["name"], pool, need)


async def reconcile_run(
    body: Obj, jobs: kopf.Index, pools: kopf.Index, memory: RunMemory, pods: Any = None
) -> None:
    api = kube()
    spec: TrainingRunSpec | None = None
    try:
        run = model.parse(body)
    except InvalidSpec as err:
        seen = status.Observed(job_of(body, jobs), None, invalid=str(err))
    else:
        spec, seen = run.spec, observe(run, jobs, pools, pods)
        admission = await read_admission(api, run, seen)
        if admission:
            seen = dataclasses.replace(seen, admission=admission)
        if not seen.invalid:
            issues = await ensure_static(api, run, memory)
            seen = dataclasses.replace(seen, issues=tuple(issues))
            late = await drive_job(api, run, seen) or await pod_refusal(api, run, seen)
            if late:
                seen = dataclasses.replace(seen, issues=(*seen.issues, late))
    new = status.compute_run_status(body, spec, seen, conditions.now_iso())
    old = statuswrite.baseline(body, memory.last_status, memory.written)
    report_demand(body, spec, (old or {}).get("phase") in TERMINAL or new["phase"] in TERMINAL)
    if (old or {}).get("phase") in TERMINAL and seen.job is None:
        return  # a finished run whose Job was removed stays finished
    if not status.owned_changed(old, new):
        return
    meta = body["metadata"]
    reply = await call(
        api.patch, "TrainingRun", meta["namespace"], meta["name"], {"status": new}, "status"
    )
    memory.last_status, memory.written = new, statuswrite.written_by(body, reply)
    if (old or {}).get("phase") != new["phase"]:
        failed = conditions.find(new["conditions"], conditions.FAILED) or {}
        message = failed.get("message") or f"phase {new['phase']}"
        await call(events.post, api, body, new["phase"], message, new["phase"] == status.FAILED)
    degraded = conditions.find(new["conditions"], conditions.DEGRADED) or {}
    before = conditions.find((old or {}).get("conditions") or [], conditions.DEGRADED) or {}
    if degraded.get("status") == "True" and before.get("message") != degraded.get("message"):
        await call(events.post, api, body, degraded["reason"], degraded["message"], True)


async def run_loop(live: Any, jobs: kopf.Index, pools: kopf.Index, pods: Any = None) -> None:
    """The per-run loop; `live.body` is the run as last seen by the watch."""
    cfg, meta = settings_mod.get(), live.body["metadata"]
    key: wakeups.Key = ("TrainingRun", meta["namespace"], meta["name"])
    wakeups.register(key)
    memory = RunMemory()
    try:
        while not live.stopped:
            try:
                with metrics.timed_reconcile("TrainingRun"):
                    await reconcile_run(live.body, jobs, pools, memory, pods)
            except Exception as err:  # the next pass retries from the world's state
                log.exception("reconcile of run %s/%s failed: %s", *key[1:], err)
            await wakeups.wait(key, cfg.resync_seconds)
            await asyncio.sleep(cfg.debounce_seconds)
    finally:
        wakeups.forget(key)
        metrics.set_run_demand(meta["namespace"], meta["name"], None, None)
