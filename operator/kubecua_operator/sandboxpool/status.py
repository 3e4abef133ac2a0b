"""The pool's status, computed whole from the observed sandboxes and the plan."""

from __future__ import annotations

from typing import Any

from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_operator import conditions as c
from kubecua_operator import names
from kubecua_operator.sandboxpool.model import (
    FAILED,
    PENDING,
    READY,
    TERMINATING,
    Pool,
    RunDemand,
    Sandbox,
)
from kubecua_operator.sandboxpool.plan import Plan


def count_states(sandboxes: list[Sandbox], leased: int) -> dict[str, int]:
    """Sandboxes per state for the kubecua_pool_sandboxes gauge; leased ones also count as ready."""
    counts = {state: sum(s.state == state for s in sandboxes) for state in (PENDING, READY, FAILED)}
    counts["terminating"] = sum(s.state == TERMINATING for s in sandboxes)
    counts["leased"] = leased
    return counts


def compute_status(
    pool: Pool,
    sandboxes: list[Sandbox],
    plan: Plan,
    issue: tuple[str, str] | None = None,
    created: int = 0,
    demand: list[RunDemand] | None = None,
    cap: int | None = None,
) -> dict[str, Any]:
    """`issue`: (reason, message) of a pool-level fault (the API refused its sandboxes, KubeVirt
    missing): Degraded=True with it, whatever the sandboxes say. `created`: sandboxes this pass
    created; they exist once the status is written, so `replicas` counts them (else a pass that
    replaces lost sandboxes would publish the count from before it replaced them). `demand`: the
    pool's active runs that ask for capacity; with any, status.demand and DemandMet say what they
    asked and whether spec.maxReplicas covers it (else both are removed). `cap`: the most
    sandboxes the backend can have (an external pool's endpoints; plan.plan_options)."""
    meta, spec = pool.body["metadata"], pool.spec
    gen = meta.get("generation", 0)
    live = [s for s in sandboxes if s.state != TERMINATING]
    ready = sum(s.state == READY for s in live)
    want = spec.replicas if plan.replicas is None else plan.replicas
    changing = bool(plan.create or plan.delete) or len(live) != plan.target or ready < len(live)
    conds = [
        c.make(c.READY, ready >= want, "AllReady" if ready >= want else "NotEnoughReady",
               f"{ready}/{want} sandboxes ready", gen),
        c.make(c.PROGRESSING, changing, "Scaling" if changing else "Stable",
               f"{len(live)} sandboxes, target {plan.target}", gen),
        _degraded(live, issue, gen),
        c.make(c.SCALING_LIMITED, bool(plan.limited), plan.limited or "NotLimited",
               _limited_message(plan), gen),
    ]  # fmt: skip
    summary = None
    if demand:
        summary = demand_summary(demand, want)
        conds.append(demand_condition(spec, summary, gen, cap))
    old = (pool.body.get("status") or {}).get("conditions") or []
    return {
        "replicas": len(live) + created,
        "readyReplicas": ready,
        "leasedReplicas": plan.leased,
        "selector": names.pool_selector(meta["name"]),
        "observedGeneration": gen,
        "demand": summary,  # None removes it (a merge patch) once no active run asks
        "conditions": c.merge(old, conds),
    }


def deleting_status(
    pool: Pool, sandboxes: list[Sandbox], leased: int, demand: list[RunDemand] | None = None
) -> dict[str, Any]:
    """The status of a pool being deleted: its deletionTimestamp is set and a finalizer holds it
    (foregroundDeletion while the garbage collector removes its children, or a user's). The
    sandboxes are counted as they are, Ready turns False and Deleting True naming what holds the
    pool, so nobody reads the last status of a live pool; DemandMet (if runs still ask) is False.
    Nothing is created or replaced meanwhile: the children go with the pool."""
    meta = pool.body["metadata"]
    gen = meta.get("generation", 0)
    live = [s for s in sandboxes if s.state != TERMINATING]
    ready = sum(s.state == READY for s in live)
    held = ", ".join(meta.get("finalizers") or []) or "none left"
    conds = [
        c.make(c.READY, False, "Deleting",
               f"the pool is being deleted; {ready}/{len(live)} sandboxes ready until they go",
               gen),
        c.make(c.PROGRESSING, True, "Deleting",
               f"{len(live)} sandboxes left; nothing is created or replaced", gen),
        _degraded(live, None, gen),
        c.make(c.SCALING_LIMITED, False, "Deleting", "the pool is being deleted; it does not scale",
               gen),
        c.make(c.DELETING, True, "WaitingForFinalizers",
               f"deletion requested at {meta['deletionTimestamp']}; finalizers: {held}", gen),
    ]  # fmt: skip
    summary = None
    if demand:
        summary = demand_summary(demand, 0)
        conds.append(c.make(c.DEMAND_MET, False, "Deleting",
                            f"active runs ask for {summary['sandboxes']} sandboxes but the pool"
                            " is being deleted", gen))  # fmt: skip
    old = (pool.body.get("status") or {}).get("conditions") or []
    return {
        "replicas": len(live),
        "readyReplicas": ready,
        "leasedReplicas": leased,
        "selector": names.pool_selector(meta["name"]),
        "observedGeneration": gen,
        "demand": summary,
        "conditions": c.merge(old, conds),
    }


def invalid_status(body: dict[str, Any], message: str) -> dict[str, Any]:
    """The status of a pool whose stored spec the model refuses (one stored under an older
    schema), as a TrainingRun's Failed condition says it: Ready False and Degraded True with
    reason InvalidSpec, naming each field. Nothing is created, deleted or counted until the spec
    parses, so the counts are left as last written (a merge patch leaves out what it omits)."""
    gen = body["metadata"].get("generation", 0)
    held = "nothing is created or deleted until the spec is fixed"
    refused = "the spec does not parse (Degraded names the fields)"
    conds = [
        c.make(c.READY, False, "InvalidSpec", refused, gen),
        c.make(c.PROGRESSING, False, "InvalidSpec", held, gen),
        c.make(c.DEGRADED, True, "InvalidSpec", message, gen),
        c.make(c.SCALING_LIMITED, False, "InvalidSpec", held, gen),
    ]
    old = (body.get("status") or {}).get("conditions") or []
    return {"observedGeneration": gen, "conditions": c.merge(old, conds)}


def demand_summary(demand: list[RunDemand], replicas: int) -> dict[str, Any]:
    runs = sorted(demand, key=lambda d: d.run)
    return {
        "sandboxes": sum(d.sandboxes for d in runs),
        "replicas": replicas,
        "runs": [{"name": d.run, "sandboxes": d.sandboxes} for d in runs],
    }


def demand_condition(
    spec: SandboxPoolSpec, summary: dict[str, Any], gen: int, cap: int | None = None
) -> dict[str, Any]:
    """DemandMet: whether the pool keeps as many sandboxes as its active runs ask for. False when
    spec.maxReplicas (or `cap`, an external pool's list of endpoints) is too small."""
    asked, kept = summary["sandboxes"], summary["replicas"]
    who = ", ".join(f"{r['name']} {r['sandboxes']}" for r in summary["runs"])
    if kept >= asked:
        return c.make(
            c.DEMAND_MET,
            True,
            "DemandCovered",
            f"active runs ask for {asked} sandboxes ({who}); the pool keeps {kept}",
            gen,
        )
    limit = spec.max_replicas
    why = "it has no maxReplicas" if limit is None else f"maxReplicas is {limit}"
    if cap is not None and cap < (limit or 0):
        why = f"it has {cap} endpoints"
    return c.make(c.DEMAND_MET, False, "MaxReplicasTooLow",
                  f"active runs ask for {asked} sandboxes ({who}) but the pool keeps {kept}: {why}",
                  gen)  # fmt: skip


def _degraded(live: list[Sandbox], issue: tuple[str, str] | None, gen: int) -> dict[str, Any]:
    if issue:
        return c.make(c.DEGRADED, True, issue[0], issue[1], gen)
    failed = [s for s in live if s.state == FAILED]
    if not failed:
        return c.make(c.DEGRADED, False, "NoFailures", "0 sandboxes failed", gen)
    reasons: dict[str, int] = {}
    for s in failed:
        reasons[s.reason or "Failed"] = reasons.get(s.reason or "Failed", 0) + 1
    detail = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items()))
    return c.make(c.DEGRADED, True, "SandboxesFailed", f"{len(failed)} sandboxes failed ({detail})",
                  gen)  # fmt: skip


def _limited_message(plan: Plan) -> str:
    return {
        "Unschedulable": "sandboxes cannot be scheduled; holding instead of creating more",
        "ReplacementBackoff": "failed sandboxes are replaced after a backoff delay",
    }.get(plan.limited, "scaling is not held back")


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether `new` differs from the stored status in any field we own."""
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())
