"""Status is computed whole: pool conditions and TrainingRun phases."""

from __future__ import annotations

import pytest

from kubecua_operator import conditions as c
from kubecua_operator.sandboxpool.model import (
    FAILED,
    READY,
    RunDemand,
    Sandbox,
    parse_pool,
    summarize_run_demand,
)
from kubecua_operator.sandboxpool.plan import Plan
from kubecua_operator.sandboxpool.status import compute_status
from kubecua_operator.trainingrun.model import parse
from kubecua_operator.trainingrun.status import JobView, Observed, compute_phase, compute_run_status

POOL_META = {"name": "p", "generation": 4}
POOL = parse_pool({"metadata": POOL_META, "spec": {"replicas": 3}})
RUN_SPEC = {"model": {"path": "/m"}, "sandboxes": {"poolRef": "p", "minReady": 2},
            "tasks": {"path": "/t"}, "steps": 1, "trainer": {"nodes": 1}}  # fmt: skip


def run_status(run: dict, seen: Observed, now: str) -> dict:
    """The status of a run as the operator computes it: its spec parsed once."""
    return compute_run_status(run, parse(run).spec, seen, now)


def test_pool_status_counts_and_conditions():
    sandboxes = [Sandbox("p-0", 0, READY), Sandbox("p-1", 1, READY), Sandbox("p-2", 2, FAILED)]
    st = compute_status(POOL, sandboxes, Plan(target=3, leased=1, limited="ReplacementBackoff"))
    assert (st["replicas"], st["readyReplicas"], st["leasedReplicas"]) == (3, 2, 1)
    assert st["selector"] == "kubecua.dev/pool=p,app.kubernetes.io/component=sandbox"
    assert st["observedGeneration"] == 4
    conds = {x["type"]: (x["status"], x["reason"]) for x in st["conditions"]}
    assert conds == {
        "Ready": ("False", "NotEnoughReady"),
        "Progressing": ("True", "Scaling"),
        "Degraded": ("True", "SandboxesFailed"),
        "ScalingLimited": ("True", "ReplacementBackoff"),
    }


def test_pool_is_ready_and_stable_when_all_sandboxes_are_ready():
    sandboxes = [Sandbox(f"p-{i}", i, READY) for i in range(3)]
    st = compute_status(POOL, sandboxes, Plan(target=3))
    assert c.is_true(st["conditions"], "Ready")
    assert not c.is_true(st["conditions"], "Progressing")


def test_pool_status_counts_the_sandboxes_its_pass_created():
    # Two of three were lost and this pass re-created them: once the status is written, three
    # exist (one ready). Counting only the observed one would publish replicas 1 for a pass.
    st = compute_status(POOL, [Sandbox("p-0", 0, READY)], Plan(target=3, create=[1, 2]), None, 2)
    assert (st["replicas"], st["readyReplicas"]) == (3, 1)
    assert c.is_true(st["conditions"], "Progressing")


def test_pool_status_records_the_runs_demand_and_whether_max_replicas_covers_it():
    pool = parse_pool({"metadata": POOL_META, "spec": {"replicas": 1, "maxReplicas": 6}})
    demand = [RunDemand("b", 2, True), RunDemand("a", 3, True)]
    st = compute_status(pool, [], Plan(target=5, replicas=5), demand=demand)
    assert st["demand"] == {
        "sandboxes": 5,
        "replicas": 5,
        "runs": [{"name": "a", "sandboxes": 3}, {"name": "b", "sandboxes": 2}],
    }
    met = c.find(st["conditions"], "DemandMet")
    assert (met["status"], met["reason"]) == ("True", "DemandCovered")
    assert met["message"] == "active runs ask for 5 sandboxes (a 3, b 2); the pool keeps 5"

    demand.append(RunDemand("c", 4, True))
    st = compute_status(pool, [], Plan(target=6, replicas=6), demand=demand)
    met = c.find(st["conditions"], "DemandMet")
    assert (met["status"], met["reason"]) == ("False", "MaxReplicasTooLow")
    assert met["message"] == (
        "active runs ask for 9 sandboxes (a 3, b 2, c 4) but the pool keeps 6: maxReplicas is 6"
    )
    st = compute_status(pool, [], Plan(target=1, replicas=1), demand=[])
    assert st["demand"] is None  # a merge patch removes it
    assert c.find(st["conditions"], "DemandMet") is None


@pytest.mark.parametrize(
    ("suspend", "phase", "active"),
    [(False, None, True), (False, "Running", True), (True, "Running", False),
     (False, "Succeeded", False), (False, "Failed", False)],
)  # fmt: skip
def test_a_run_demands_capacity_while_it_is_neither_suspended_nor_finished(suspend, phase, active):
    capacity = {"episodes": 4, "spares": 1}
    run = {
        "metadata": {"name": "r"},
        "spec": {
            **RUN_SPEC,
            "suspend": suspend,
            "sandboxes": {"poolRef": "p", "capacity": capacity},
        },
        "status": {"phase": phase} if phase else {},
    }
    assert summarize_run_demand(parse(run)) == RunDemand("r", 5, active)
    capacity.pop("spares")  # the model's default, 0
    assert summarize_run_demand(parse(run)) == RunDemand("r", 4, active)
    run["spec"]["sandboxes"].pop("capacity")
    assert summarize_run_demand(parse(run)) is None


@pytest.mark.parametrize(
    ("spec", "job", "phase"),
    [
        ({}, None, "Pending"),
        ({}, JobView("j", active=0), "Pending"),
        ({}, JobView("j", active=1), "Running"),
        ({"suspend": True}, JobView("j", suspend=True), "Suspended"),
        ({}, JobView("j", complete=True), "Succeeded"),
        ({"suspend": True}, JobView("j", failed=4, failed_reason="BackoffLimitExceeded"), "Failed"),
    ],
)
def test_run_phase_table(spec, job, phase):
    assert compute_phase(parse({"spec": {**RUN_SPEC, **spec}}).spec, Observed(job, 2))[0] == phase


def test_run_waits_for_min_ready_sandboxes_with_a_named_condition():
    run = {"metadata": {"generation": 1}, "spec": RUN_SPEC}
    st = run_status(run, Observed(None, 1), "T0")
    sand = c.find(st["conditions"], "SandboxesReady")
    assert st["phase"] == "Pending"
    assert sand["status"] == "False"
    assert sand["reason"] == "WaitingForSandboxes"
    assert sand["message"] == "1/2 sandboxes ready"


def test_failed_run_shows_the_reason_and_completion_time():
    run = {"metadata": {"generation": 1}, "spec": RUN_SPEC, "status": {"startTime": "T0"}}
    job = JobView("j", failed=4, failed_reason="BackoffLimitExceeded", failed_message="too many")
    st = run_status(run, Observed(job, 2), "T9")
    failed = c.find(st["conditions"], "Failed")
    assert st["phase"] == "Failed"
    assert failed["reason"] == "BackoffLimitExceeded"
    assert st["restarts"] == 4
    assert st["startTime"] == "T0"
    assert st["completionTime"] == "T9"


def test_a_run_asking_for_capacity_shows_its_pools_demand_met_while_active():
    spec = {**RUN_SPEC, "sandboxes": {"poolRef": "p", "capacity": {"episodes": 4}}}
    run = {"metadata": {"name": "r", "generation": 1}, "spec": spec}
    short = ("False", "MaxReplicasTooLow", "active runs ask for 9 sandboxes (r 4, s 5) but ...")
    st = run_status(run, Observed(None, 1, pool_demand=short), "T0")
    met = c.find(st["conditions"], "DemandMet")
    assert (met["status"], met["reason"]) == ("False", "MaxReplicasTooLow")
    assert met["message"] == f"SandboxPool p: {short[2]}"
    suspended = {**run, "spec": {**spec, "suspend": True}}
    st = run_status(suspended, Observed(None, 1, pool_demand=short), "T0")
    assert c.find(st["conditions"], "DemandMet") is None  # a suspended run asks nothing
    st = run_status({**run, "spec": RUN_SPEC}, Observed(None, 1, pool_demand=short), "T0")
    assert c.find(st["conditions"], "DemandMet") is None  # no capacity asked


def test_a_warm_up_below_its_goal_shows_as_a_condition_from_the_trainers_status():
    run = {"metadata": {"generation": 2}, "spec": RUN_SPEC}
    assert c.find(run_status(run, Observed(None, 2), "T0")["conditions"], "WarmupBelowGoal") is None
    warmup = {"epochs": 120, "extendedEpochs": 30, "replyMatch": 0.125, "replies": 96,
              "goal": 0.6, "belowGoal": True, "result": "BelowGoalFailed"}  # fmt: skip
    st = run_status({**run, "status": {"warmup": warmup}}, Observed(None, 2), "T1")
    cond = c.find(st["conditions"], "WarmupBelowGoal")
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "True", "BelowGoalFailed", 2,
    )  # fmt: skip
    assert cond["message"] == (
        "the greedy policy reproduces 12% of the demonstrated replies measured after 120 epochs"
        " of warm-up; its goal is 60%"
    )
    met = {**warmup, "replyMatch": 0.85, "belowGoal": False, "result": "Met"}
    st = run_status({**run, "status": {"warmup": met}}, Observed(None, 2), "T2")
    assert c.find(st["conditions"], "WarmupBelowGoal")["status"] == "False"
    # status is writable by others: a malformed figure gives a plain message, never a crash
    odd = {"belowGoal": True, "result": "Not a reason!", "replyMatch": "x"}
    cond = c.find(run_status({**run, "status": {"warmup": odd}}, Observed(None, 2), "T3")
                  ["conditions"], "WarmupBelowGoal")  # fmt: skip
    assert (cond["reason"], cond["message"]) == (
        "BelowGoal", "the warm-up was measured against spec.warmup.goal",
    )  # fmt: skip


def merge_patch(stored: dict, patch: dict) -> dict:
    """RFC 7386 for a flat status with list values, as the API server applies {"status": ...}."""
    out = dict(stored)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_a_status_write_racing_a_forged_one_leaves_exactly_the_computed_status():
    """The loop compares its next pass with what it wrote, so its write must leave the stored
    owned fields equal to it even when someone else wrote in between (CI, 2026-11-28: a forged
    startTime in the year 2099 outlived a write computed before it, and the next pass saw no
    change to make)."""
    from kubecua_operator.trainingrun.status import OWNED

    before = {"metadata": {"generation": 1}, "spec": RUN_SPEC, "status": {"phase": "Pending"}}
    new = run_status(before, Observed(JobView("j"), 0), "2026-11-28T00:00:00Z")
    forged = {"phase": "Succeeded", "startTime": "2099-01-01T00:00:00Z",
              "completionTime": "2099-01-02T00:00:00Z", "readySandboxes": 9}  # fmt: skip
    stored = merge_patch(forged, new)
    assert set(OWNED) <= set(new)  # each owned field said, None where it has no value
    assert {k: stored.get(k) for k in OWNED} == {k: new[k] for k in OWNED}
    assert (stored["phase"], "startTime" in stored, "completionTime" in stored) == (
        "Pending", False, False)  # fmt: skip
