"""After the API was unreachable, a pool trusts fresh lists until its index has caught up.

The real partition is in test_stale_cache.py; this pins the decision pass by pass, because the
window it covers (the index's watch reconnects seconds after the API answers again) is a race
there. Before, one list was trusted and the next pass read the lagging index: the sandboxes the
pool had just created were missing from it, and the status stepped back from 4 to 2 replicas.
"""

from __future__ import annotations

import asyncio

import pytest

from kubecua_operator.apihealth import HEALTH
from kubecua_operator.sandboxpool import reconcile
from kubecua_operator.sandboxpool.model import Summary
from kubecua_operator.sandboxpool.reconcile import PoolMemory, compare_with_list

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

    monkeypatch.setattr(reconcile, "list_children", list_children)
    return state


def observe(memory: PoolMemory, indexed: list[Summary]) -> set[str]:
    kids = asyncio.run(reconcile.observed_children(None, POOL, indexed, memory))
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
