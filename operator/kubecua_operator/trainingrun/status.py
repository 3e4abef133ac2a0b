"""A TrainingRun's operator-owned status, computed whole from its Job and its pool.

The trainer patches step, totalSteps, meanReward, successRate, tokensPerSecond, lastCheckpoint,
evaluation and warmup; this module never writes those, so the two writers never fight over a
field. The WarmupBelowGoal condition is this module's, read from the trainer's status.warmup. A run
with steps 0 (evaluation only) goes through the same phases as any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator import conditions as c
from kubecua_operator.ownership import Issue

Obj = dict[str, Any]
PENDING, RUNNING, SUSPENDED, SUCCEEDED, FAILED = (
    "Pending", "Running", "Suspended", "Succeeded", "Failed",
)  # fmt: skip
PODS_REFUSED = "TrainerPodsRefused"  # the Job controller cannot create the trainer's pods
OWNED = ("phase", "conditions", "startTime", "completionTime", "restarts", "readySandboxes",
         "observedGeneration")  # fmt: skip


@dataclass(frozen=True)
class JobView:
    """What the run controller needs of its trainer Job (kept in a kopf index)."""

    name: str
    uid: str = ""
    suspend: bool = False
    active: int = 0
    ready: int = 0
    failed: int = 0
    complete: bool = False
    failed_reason: str = ""
    failed_message: str = ""


def summarize_job(body: Obj) -> JobView:
    status = body.get("status") or {}
    conds = {x.get("type"): x for x in status.get("conditions") or [] if x.get("status") == "True"}
    failed = conds.get("Failed") or {}
    return JobView(
        name=body["metadata"]["name"],
        uid=body["metadata"].get("uid", ""),
        suspend=bool((body.get("spec") or {}).get("suspend")),
        active=int(status.get("active") or 0),
        ready=int(status.get("ready") or 0),
        failed=int(status.get("failed") or 0),
        complete="Complete" in conds,
        failed_reason=str(failed.get("reason", "")) if failed else "",
        failed_message=str(failed.get("message", "")) if failed else "",
    )


STUCK_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError"}  # fmt: skip


@dataclass(frozen=True)
class TrainerPod:
    """Why a trainer pod cannot run, if it cannot (kept in a kopf index): the scheduler's
    Unschedulable message (e.g. a missing PVC), or a container stuck waiting (ErrImagePull)."""

    name: str
    unschedulable: str = ""
    stuck_reason: str = ""
    stuck_message: str = ""


def summarize_trainer_pod(body: Obj) -> TrainerPod:
    status = body.get("status") or {}
    conds: list[Obj] = status.get("conditions") or []
    sched: Obj = next((c for c in conds if c.get("type") == "PodScheduled"), {})
    unschedulable = (
        status.get("phase", "Pending") == "Pending"  # a running pod was scheduled, whatever else
        and sched.get("status") == "False"
        and sched.get("reason") == "Unschedulable"
    )
    waiting = [
        (c.get("state") or {}).get("waiting") or {} for c in status.get("containerStatuses") or []
    ]
    stuck = next((w for w in waiting if w.get("reason") in STUCK_REASONS), {})
    return TrainerPod(
        name=body["metadata"]["name"],
        unschedulable=str(sched.get("message") or "unschedulable") if unschedulable else "",
        stuck_reason=str(stuck.get("reason", "")),
        stuck_message=str(stuck.get("message", "")),
    )


@dataclass(frozen=True)
class Observed:
    """The world as one pass sees it."""

    job: JobView | None
    ready_sandboxes: int | None  # None: no pool to wait for (static urls)
    pool_found: bool = True
    invalid: str = ""  # a reason the run can never start in a cluster
    pool_token: str | None = None  # the bound pool's token Secret (main.pool_readiness)
    pool_uid: str = ""  # the bound pool's uid, told to its trainers
    pods: tuple[TrainerPod, ...] = ()  # trainer pods of the Job
    pool_demand: tuple[str, str, str] | None = None  # the pool's DemandMet (status, reason, msg)
    admission: Admission | None = None  # Kueue's word on the Job's Workload (spec.kueue)
    issues: tuple[Issue, ...] = ()  # children not written: someone else's, or refused


@dataclass(frozen=True)
class Admission:
    """A Kueue Workload's admission state, as the run shows it."""

    workload: str
    admitted: bool
    reason: str
    message: str
    active: bool = True  # spec.active: False once deactivated (how a queued run is suspended)


def summarize_workload(body: Obj) -> Admission:
    """Kueue's own reason: Admitted, else why not (Evicted's, then QuotaReserved's: "Pending"
    with "insufficient unused quota ..." while the ClusterQueue is full)."""
    conds = {x.get("type"): x for x in (body.get("status") or {}).get("conditions") or []}
    name = body["metadata"]["name"]
    active = (body.get("spec") or {}).get("active", True) is not False

    def true(t: str) -> Obj | None:
        cond = conds.get(t)
        return cond if cond and cond.get("status") == "True" else None

    if admitted := true("Admitted"):
        return Admission(name, True, "Admitted", str(admitted.get("message", "")), active)
    why = true("Evicted") or conds.get("QuotaReserved") or conds.get("Admitted") or {}
    reason = str(why.get("reason") or "Pending")
    message = str(why.get("message") or "waiting for Kueue to consider the Workload")
    return Admission(name, False, reason, message, active)


def sandboxes_condition(spec: TrainingRunSpec, seen: Observed, gen: int) -> Obj:
    need = spec.sandboxes.min_ready
    if seen.ready_sandboxes is None:
        return c.make(c.SANDBOXES_READY, True, "StaticUrls", "sandboxes given by URL", gen)
    if not seen.pool_found:
        pool = spec.sandboxes.pool_ref
        return c.make(
            c.SANDBOXES_READY, False, "PoolNotFound", f"SandboxPool {pool} not found", gen
        )
    ok = seen.ready_sandboxes >= need
    return c.make(c.SANDBOXES_READY, ok, "MinReadyMet" if ok else "WaitingForSandboxes",
                  f"{seen.ready_sandboxes}/{need} sandboxes ready", gen)  # fmt: skip


def compute_phase(spec: TrainingRunSpec, seen: Observed) -> tuple[str, str, str]:
    """(phase, reason, message): terminal Job states win, then suspend, then pods running."""
    job = seen.job
    if seen.invalid:
        return FAILED, "InvalidSpec", seen.invalid
    if job and job.failed_reason:
        return FAILED, job.failed_reason, job.failed_message or "trainer Job failed"
    if job and job.complete:
        done = "its evaluation" if spec.steps == 0 else "all steps"
        return SUCCEEDED, "Completed", f"trainer finished {done}"
    if spec.suspend:
        return SUSPENDED, "Suspended", "suspended by spec.suspend"
    queued = seen.admission
    if job and job.suspend and queued and not queued.admitted:
        return PENDING, "WaitingForAdmission", f"Kueue: {queued.reason}: {queued.message}"
    if seen.issues and not (job and job.active > 0):
        first = seen.issues[0]
        return PENDING, first.reason, first.message
    blocked = next((p for p in seen.pods if p.unschedulable), None)
    if job and blocked:
        return PENDING, "TrainerUnschedulable", f"{blocked.name}: {blocked.unschedulable}"
    stuck = next((p for p in seen.pods if p.stuck_reason), None)
    if job and stuck:
        return PENDING, stuck.stuck_reason, f"{stuck.name}: {stuck.stuck_message}".rstrip(": ")
    if job and job.active > 0 and not job.suspend:
        return RUNNING, "TrainerRunning", f"{job.active} trainer pods active"
    if job is None:
        return PENDING, "WaitingForSandboxes", "trainer starts once enough sandboxes are ready"
    return PENDING, "TrainerStarting", "trainer pods are starting"


def compute_run_status(body: Obj, spec: TrainingRunSpec | None, seen: Observed, now: str) -> Obj:
    """`body`: the run as stored (generation, old status); `spec` None: it did not parse, and
    seen.invalid says where (the run is Failed, with Progressing and Failed conditions only)."""
    gen = body["metadata"].get("generation", 0)
    old = body.get("status") or {}
    conds: list[Obj] = []
    if spec is None:
        phase, reason, message = FAILED, "InvalidSpec", seen.invalid
    else:
        phase, reason, message = compute_phase(spec, seen)
        nodes, ready = spec.trainer.nodes, seen.job.ready if seen.job else 0
        pods_ready = "AllPodsReady" if ready >= nodes else "PodsNotReady"
        conds += [
            sandboxes_condition(spec, seen, gen),
            c.make(c.TRAINER_READY, ready >= nodes, pods_ready,
                   f"{ready}/{nodes} trainer pods ready", gen),
            degraded_condition(seen.issues, gen),
        ]  # fmt: skip
    conds += [
        c.make(c.PROGRESSING, phase in (PENDING, RUNNING), reason, message, gen),
        c.make(c.FAILED, phase == FAILED, reason if phase == FAILED else "NoFailure",
               message if phase == FAILED else "", gen),
    ]  # fmt: skip
    if seen.admission:  # Kueue's reason verbatim: Admitted, Pending, Deactivated, Preempted...
        a = seen.admission
        conds.append(
            c.make(c.ADMITTED, a.admitted, a.reason, f"Workload {a.workload}: {a.message}", gen)
        )
    demand = demand_condition(spec, phase, seen, gen) if spec else None
    if demand:
        conds.append(demand)
    warmup = warmup_condition(old.get("warmup"), gen)
    if warmup:
        conds.append(warmup)
    status: Obj = {
        "phase": phase,
        "conditions": c.merge(old.get("conditions") or [], conds, now),
        "restarts": seen.job.failed if seen.job else int(old.get("restarts") or 0),
        "observedGeneration": gen,
    }
    # Every owned field is in the patch, None where it has no value (a merge patch removes it):
    # a write that races someone else's then leaves the stored fields equal to this status, so
    # comparing the next pass with what was written is sound (a key left out would keep a forged
    # value the comparison cannot see).
    status["readySandboxes"] = seen.ready_sandboxes
    # A time in the future is not this operator's: dropped.
    start = c.not_future(old.get("startTime"), now) or (now if phase == RUNNING else None)
    status["startTime"] = start
    done = phase in (SUCCEEDED, FAILED)
    status["completionTime"] = (
        (c.not_future(old.get("completionTime"), now) or now) if done else None
    )
    return status


def degraded_condition(issues: tuple[Issue, ...], gen: int) -> Obj:
    """Degraded: True while a child is someone else's or refused by the API server, naming
    each; the first's reason."""
    if not issues:
        return c.make(c.DEGRADED, False, "NoIssues", "every child is the run's own and admitted",
                      gen)  # fmt: skip
    message = "; ".join(dict.fromkeys(i.message for i in issues))[:1024]
    return c.make(c.DEGRADED, True, issues[0].reason, message, gen)


WARMUP_RESULTS = ("Met", "MetAfterExtension", "BelowGoalContinued", "BelowGoalFailed")


def warmup_condition(warmup: Any, gen: int) -> Obj | None:
    """WarmupBelowGoal from the trainer's status.warmup (spec.warmup.goal's measurement after
    the warm-up): True with the trainer's result as reason (BelowGoalContinued, BelowGoalFailed)
    and the figure in the message; absent until the warm-up is measured.

    >>> w = {"replyMatch": 0.1, "goal": 0.6, "epochs": 120, "belowGoal": True,
    ...      "result": "BelowGoalFailed"}
    >>> cond = warmup_condition(w, 3)
    >>> cond["status"], cond["reason"], cond["message"][:45]
    ('True', 'BelowGoalFailed', 'the greedy policy reproduces 10% of the demon')
    >>> warmup_condition({**w, "belowGoal": False, "replyMatch": 0.8, "result": "Met"}, 3)["status"]
    'False'
    """
    if not isinstance(warmup, dict) or not isinstance(warmup.get("belowGoal"), bool):
        return None
    below = warmup["belowGoal"]
    reason = str(warmup.get("result"))
    if reason not in WARMUP_RESULTS:  # the CRD's enum holds it; a reason must be CamelCase
        reason = "BelowGoal" if below else "Met"
    try:
        message = (
            f"the greedy policy reproduces {float(warmup['replyMatch']):.0%} of the demonstrated"
            f" replies measured after {int(warmup['epochs'])} epochs of warm-up; its goal is"
            f" {float(warmup['goal']):.0%}"
        )
    except (KeyError, TypeError, ValueError):  # status is writable by others: never crash on it
        message = "the warm-up was measured against spec.warmup.goal"
    return c.make(c.WARMUP_BELOW_GOAL, below, reason, message, gen)


def demand_condition(spec: TrainingRunSpec, phase: str, seen: Observed, gen: int) -> Obj | None:
    """DemandMet, as the pool says it, while this run asks for capacity and is active (a
    suspended or finished run asks nothing, and the condition goes)."""
    if not spec.sandboxes.capacity or phase in (SUSPENDED, SUCCEEDED, FAILED):
        return None
    if seen.pool_demand is None:
        return None  # the pool has not counted any demand yet
    state, reason, message = seen.pool_demand
    pool = spec.sandboxes.pool_ref
    return c.make(c.DEMAND_MET, state == "True", reason, f"SandboxPool {pool}: {message}", gen)


def owned_changed(old: Obj | None, new: Obj) -> bool:
    old = old or {}
    return any(old.get(k) != new.get(k) for k in OWNED if k in new)
