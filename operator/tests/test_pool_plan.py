"""The pool's decisions, table by table: scaling, churn guard, scale-in order, recycling."""

from __future__ import annotations

import pytest

from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_operator.sandboxpool.model import FAILED, PENDING, READY, TERMINATING, Probe, Sandbox
from kubecua_operator.sandboxpool.plan import Options, free_indexes, make_plan, scale_in_order


def boxes(*states: str, unschedulable: bool = False) -> list[Sandbox]:
    return [
        Sandbox(f"p-{i}", i, s, uid=f"u{i}", unschedulable=unschedulable and s == PENDING)
        for i, s in enumerate(states)
    ]


def plan(spec: dict, sandboxes: list[Sandbox], probes: dict | None = None, **kw):
    """`spec`: the fields a case sets; the model fills in the rest with the CRD's defaults."""
    kw.setdefault("replace_allowed", True)
    kw.setdefault("burst", 32)
    return make_plan(SandboxPoolSpec.model_validate(spec), sandboxes, probes or {}, **kw)


@pytest.mark.parametrize(
    ("replicas", "states", "creates"),
    [
        (3, [], [0, 1, 2]),
        (3, [READY], [1, 2]),
        (3, [READY, READY, READY], []),
        (2, [TERMINATING], [1, 2]),  # a terminating name is not reused until it is gone
    ],
)
def test_pool_creates_the_missing_sandboxes_at_free_indexes(replicas, states, creates):
    assert plan({"replicas": replicas}, boxes(*states)).create == creates


def test_burst_caps_unready_sandboxes_then_grows_with_ready_ones():
    assert len(plan({"replicas": 1000}, []).create) == 32
    assert len(plan({"replicas": 1000}, boxes(*[PENDING] * 32)).create) == 0
    # 100 ready sandboxes allow 100 unready at once: 100 - 10 pending = 90 more
    assert len(plan({"replicas": 1000}, boxes(*[READY] * 100, *[PENDING] * 10)).create) == 90


def test_unschedulable_pool_holds_instead_of_creating_more():
    step = plan({"replicas": 50}, boxes(PENDING, PENDING, unschedulable=True))
    assert step.create == []
    assert step.limited == "Unschedulable"


def test_failed_sandbox_is_replaced_only_after_backoff():
    held = plan({"replicas": 2}, boxes(READY, FAILED), replace_allowed=False)
    assert held.delete == []
    assert held.create == []
    assert held.limited == "ReplacementBackoff"
    step = plan({"replicas": 2}, boxes(READY, FAILED))
    assert [(s.name, r) for s, r in step.delete] == [("p-1", "Failed")]
    assert step.create == []  # the successor reuses index 1 once the failed pod is gone


def test_scale_in_removes_idle_before_leased():
    sandboxes = boxes(READY, READY, READY, READY)
    probes = {"p-2": Probe(True, True), "p-3": Probe(True, True)}
    step = plan({"replicas": 2}, sandboxes, probes)
    assert sorted(s.name for s, _ in step.delete) == ["p-0", "p-1"]
    assert step.leased == 2


def test_scale_in_order_prefers_failed_then_pending_then_idle_high_index_first():
    order = scale_in_order(boxes(READY, PENDING, FAILED, READY), leased={"p-0"})
    assert [s.name for s in order] == ["p-2", "p-1", "p-3", "p-0"]


def test_warm_spares_grow_the_pool_while_sandboxes_are_leased():
    spec = {"replicas": 2, "warmSpares": 2}
    probes = {"p-0": Probe(True, True), "p-1": Probe(True, True)}
    step = plan(spec, boxes(READY, READY), probes)
    assert step.target == 4
    assert step.create == [2, 3]


def test_sandbox_is_recycled_after_max_episodes_but_never_while_leased():
    spec = {"replicas": 2, "reset": {"maxEpisodesPerSandbox": 5}}
    probes = {"p-0": Probe(True, False, 5), "p-1": Probe(True, True, 9)}
    step = plan(spec, boxes(READY, READY), probes)
    assert [(s.name, r) for s, r in step.delete] == [("p-0", "Recycled")]


def test_external_pool_target_is_capped_by_its_endpoints():
    step = plan({"replicas": 5, "warmSpares": 3}, [], options=Options(recycle_after=0, cap=2))
    assert step.target == 2
    assert step.create == [0, 1]


def test_free_indexes_fill_holes_first():
    assert free_indexes({0, 2, 3}, 3) == [1, 4, 5]


# Issue 22: runs that size their pool (spec.sandboxes.capacity; pool spec.maxReplicas).
@pytest.mark.parametrize(
    ("spec", "demand", "replicas", "creates"),
    [
        ({"replicas": 1, "maxReplicas": 8}, 5, 5, [1, 2, 3, 4]),  # a run raises its pool
        ({"replicas": 1, "maxReplicas": 8}, 5 + 2, 7, [1, 2, 3, 4, 5, 6]),  # two runs: summed
        ({"replicas": 1, "maxReplicas": 4}, 7, 4, [1, 2, 3]),  # capped by maxReplicas
        ({"replicas": 1}, 7, 1, []),  # no maxReplicas: runs never raise the pool
        ({"replicas": 3, "maxReplicas": 8}, 2, 3, [1, 2]),  # the baseline stays
    ],
)
def test_runs_demand_raises_the_baseline_up_to_max_replicas(spec, demand, replicas, creates):
    step = plan(spec, boxes(READY), demand=demand)
    assert (step.replicas, step.target, step.create) == (replicas, replicas, creates)


def test_warm_spares_come_on_top_of_the_runs_demand():
    spec = {"replicas": 1, "maxReplicas": 8, "warmSpares": 2}
    probes = {f"p-{i}": Probe(True, True) for i in range(4)}
    step = plan(spec, boxes(*[READY] * 4), probes, demand=4)
    assert (step.replicas, step.target, step.create) == (4, 6, [4, 5])


def test_capacity_given_back_leaves_with_idle_sandboxes_only():
    # Both runs finished (demand 0): of six, two are mid-episode. The four idle ones go now, the
    # leased ones stay although the pool is above its target; none is ever removed while leased.
    spec = {"replicas": 1, "maxReplicas": 8}
    probes = {"p-3": Probe(True, True), "p-5": Probe(True, True)}
    step = plan(spec, boxes(*[READY] * 6), probes, demand=0)
    assert step.target == 1
    assert sorted(s.name for s, _ in step.delete) == ["p-0", "p-1", "p-2", "p-4"]
    assert step.create == []
    # p-5's episode ends: it goes; p-3 is still leased and stays.
    live = [b for b in boxes(*[READY] * 6) if b.name in ("p-3", "p-5")]
    step = plan(spec, live, {"p-3": Probe(True, True)}, demand=0)
    assert [(s.name, r) for s, r in step.delete] == [("p-5", "ScaledIn")]


def test_scale_in_below_the_leased_count_keeps_every_leased_sandbox():
    probes = {f"p-{i}": Probe(True, True) for i in range(4)}
    step = plan({"replicas": 1}, boxes(READY, READY, READY, READY, PENDING), probes)
    assert [(s.name, r) for s, r in step.delete] == [("p-4", "ScaledIn")]
