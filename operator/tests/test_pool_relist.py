"""After the API was unreachable, a pool trusts fresh lists until its index has caught up.

The real partition is in test_stale_cache.py; this pins the decision pass by pass, because the
window it covers (the index's watch reconnects seconds after the API answers again) is a race
there. Before, one list was trusted and the next pass read the lagging index: the sandboxes the
pool had just created were missing from it, and the status stepped back from 4 to 2 replicas.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.rest import ApiException

from kubecua_operator.apihealth import HEALTH
from kubecua_operator.sandboxpool import memory as pool_memory
from kubecua_operator.sandboxpool import plan
from kubecua_operator.sandboxpool import view as pool_view
from kubecua_operator.sandboxpool.memory import PoolMemory
from kubecua_operator.sandboxpool.model import READY, TERMINATING, Sandbox, Summary, parse_pool
from kubecua_operator.sandboxpool.status import compute_status
from kubecua_operator.sandboxpool.view import compare_with_list

POOL = {"metadata": {"name": "desks", "namespace": "ns", "uid": "pool-uid"}}


def pod(uid: str, owner: str = "pool-uid") -> Summary:
    return Summary("Pod", f"desks-{uid}", uid, f"desks-{uid}", owner=owner)


def test_compare_finds_ghosts_and_whether_the_index_caught_up():
    old = [pod("a"), pod("gone")]
    view = compare_with_list(old, [pod("a"), pod("new")], "pool-uid", set())
    assert view.ghosts == {"gone"}
    assert [s.uid for s in view.children] == ["a", "new"]
    assert not view.caught_up  # "new" is not in the index yet
    both = [pod("a"), pod("new")]
    assert compare_with_list(both, both, "pool-uid", set()).caught_up
    # the index holds all that is listed, but it just missed a deletion: not caught up yet
    assert not compare_with_list(old, [pod("a")], "pool-uid", set()).caught_up
    assert compare_with_list(old, [pod("a")], "pool-uid", {"gone"}).caught_up
    # a foreign object the list found does not count as ours, nor hold the index back
    foreign = compare_with_list([pod("a")], [pod("a"), pod("x", owner="other")], "pool-uid", set())
    assert foreign.caught_up
    assert [s.uid for s in foreign.children] == ["a"]


@pytest.fixture
def api_listing(monkeypatch):
    """What the API lists (the test sets it) and how many times it was asked."""
    state = {"listed": [], "calls": 0}

    async def list_children(api, body):
        state["calls"] += 1
        return list(state["listed"])

    monkeypatch.setattr(pool_view, "list_children", list_children)
    return state


def observe(memory: PoolMemory, indexed: list[Summary]) -> set[str]:
    kids = asyncio.run(pool_view.observed_children(None, POOL, indexed, memory))
    return {s.uid for s in kids}


def test_lists_again_until_the_index_holds_what_the_pool_created(api_listing):
    memory = PoolMemory()
    api_listing["listed"] = [pod("a"), pod("b")]
    assert observe(memory, [pod("a"), pod("b")]) == {"a", "b"}  # first pass lists; in step
    assert observe(memory, [pod("a"), pod("b")]) == {"a", "b"}
    assert api_listing["calls"] == 1

    # A partition: "b" was deleted meanwhile, and the API answers again.
    HEALTH.failed()
    HEALTH.ok()
    api_listing["listed"] = [pod("a")]
    stale = [pod("a"), pod("b")]  # the index still holds the ghost
    assert observe(memory, stale) == {"a"}
    # The pool created "c"; the index's watch has not reconnected, so it lacks "c".
    api_listing["listed"] = [pod("a"), pod("c")]
    assert observe(memory, stale) == {"a", "c"}
    assert api_listing["calls"] == 3
    # The watch caught up: from here on the index is read, without the ghost.
    caught_up = [pod("a"), pod("b"), pod("c")]
    assert observe(memory, caught_up) == {"a", "c"}
    assert api_listing["calls"] == 4
    assert observe(memory, caught_up) == {"a", "c"}
    assert api_listing["calls"] == 4


def test_a_child_kopf_listed_makes_the_pool_list_again(api_listing):
    """kopf starts a watch anew with a list (after 410 Gone, e.g. an API server restart); what
    was deleted before that list stays in its index. Issue 20: the pool had verified its view
    just before, trusted the index for a relist period (60 s) and counted the ghosts ready."""
    memory = PoolMemory()
    api_listing["listed"] = [pod("a"), pod("b")]
    assert observe(memory, [pod("a"), pod("b")]) == {"a", "b"}
    assert observe(memory, [pod("a"), pod("b")]) == {"a", "b"}
    assert api_listing["calls"] == 1
    api_listing["listed"] = [pod("a")]  # "b" deleted while the watch was down
    pool_view.child_listed("ns", "desks")
    assert observe(memory, [pod("a"), pod("b")]) == {"a"}
    assert api_listing["calls"] == 2
    assert observe(memory, [pod("a"), pod("b")]) == {"a"}  # the ghost stays ignored
    assert api_listing["calls"] == 3  # a new ghost: listed once more, then the index is read
    assert observe(memory, [pod("a"), pod("b")]) == {"a"}
    assert api_listing["calls"] == 3
    pool_view.LISTED.clear()


def test_an_index_that_holds_a_child_in_an_older_state_has_not_caught_up():
    ready = Summary("Pod", "desks-a", "a", "desks-a", ready=True, owner="pool-uid")
    going = Summary("Pod", "desks-a", "a", "desks-a", ready=True, deleting=True, owner="pool-uid")
    assert not compare_with_list([ready], [going], "pool-uid", set()).caught_up
    assert compare_with_list([going], [going], "pool-uid", set()).caught_up


def test_sandboxes_the_pass_deleted_are_not_ready_in_its_status_or_later_views():
    """Issue 20: a scale-in pass published its status from the view before its deletes, and a
    lagging index showed the deleted sandboxes ready afterwards too."""
    pool = parse_pool({"metadata": {"name": "desks", "generation": 1}, "spec": {"replicas": 1}})
    boxes = [Sandbox(f"desks-{i}", i, READY, uid=f"u{i}") for i in range(3)]
    step = plan.make_plan(pool.spec, boxes, {}, replace_allowed=True, burst=4)
    assert sorted(s.index for s, _ in step.delete) == [1, 2]
    memory = PoolMemory()
    results = [(1, "deleted"), (2, ApiException(status=500))]  # the second delete failed
    assert pool_memory.outcome(results, step, memory) == 0
    assert memory.deleted == {"u1"}
    view = pool_memory.mark_deleted(boxes, memory.deleted)
    assert [s.state for s in view] == [READY, TERMINATING, READY]
    st = compute_status(pool, view, step)
    assert (st["replicas"], st["readyReplicas"]) == (2, 2)
