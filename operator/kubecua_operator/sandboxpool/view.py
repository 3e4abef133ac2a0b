"""What a pass sees: the pool's children from kopf's indexes, or from fresh lists when the
indexes may lag (after an outage, after kopf re-listed, every relist period); the pool itself as
read after an outage; and what the cluster lacks for the backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import kopf

from kubecua_operator import names
from kubecua_operator import settings as settings_mod
from kubecua_operator.apihealth import HEALTH
from kubecua_operator.k8s import Kube, call
from kubecua_operator.sandboxpool import backends
from kubecua_operator.sandboxpool.memory import PoolMemory
from kubecua_operator.sandboxpool.model import RunDemand, Summary, summarize_object, summarize_pod

log = logging.getLogger(__name__)
Obj = dict[str, Any]
SLICE_SELECTOR = "endpointslice.kubernetes.io/managed-by=kubecua.dev-operator"


def pool_children(body: Obj, indexes: list[kopf.Index]) -> list[Summary]:
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    return [summary for index in indexes for summary in index.get(key, [])]


def pool_demands(body: Obj, index: kopf.Index | None) -> list[RunDemand]:
    if index is None:
        return []
    return list(index.get((body["metadata"]["namespace"], body["metadata"]["name"]), []))


async def list_children(api: Kube, body: Obj) -> list[Summary]:
    """The pool's children straight from the API (what the indexes hold, without their lag)."""
    meta = body["metadata"]
    ns, selector = meta["namespace"], f"{names.POOL_LABEL}={meta['name']}"
    pods, services, slices = await asyncio.gather(
        call(api.list, "Pod", ns, selector),
        call(api.list, "Service", ns, selector),  # foreign members too, as the index holds them
        call(api.list, "EndpointSlice", ns, f"{selector},{SLICE_SELECTOR}"),
    )
    return (
        [summarize_pod(p) for p in pods]
        + [summarize_object("Service", s) for s in services]
        + [summarize_object("EndpointSlice", s) for s in slices]
    )


# (namespace, pool) -> when kopf last delivered a child from a list rather than a watch event
LISTED: dict[tuple[str, str], float] = {}


def child_listed(namespace: str, pool: str) -> None:
    """kopf (re)started a watch of the pool's children with a list: after a 410 Gone, e.g. when
    the API server restarted, or when a watch could not resume. Whatever was deleted before
    that list stays in kopf's index, as a ghost the pool finds only by listing itself."""
    LISTED[(namespace, pool)] = time.monotonic()


async def observed_children(
    api: Kube, body: Obj, indexed: list[Summary], memory: PoolMemory
) -> list[Summary]:
    """The pool's own children. From the indexes, except right after the API was unreachable,
    after kopf re-listed any of them, and every relist period: then from fresh lists, until the
    index holds what a list found, as the list found it (its watch has caught up). Whatever the
    index holds that a list lacks is a ghost (deleted while the watch was down) and ignored
    from then on."""
    cfg, now = settings_mod.get(), time.monotonic()
    meta = body["metadata"]
    uid = meta["uid"]
    listed_at = LISTED.get((meta["namespace"], meta["name"]), -1.0)
    if (
        memory.verified_epoch != HEALTH.epoch
        or listed_at >= memory.verified_at
        or now - memory.verified_at >= cfg.relist_seconds
    ):
        epoch = HEALTH.epoch
        listed = await list_children(api, body)
        view = compare_with_list(indexed, listed, uid, memory.ghosts)
        if view.ghosts - memory.ghosts:
            log.warning("pool %s: %d indexed children no longer exist; re-listed",
                        body["metadata"]["name"], len(view.ghosts))  # fmt: skip
        memory.ghosts = view.ghosts
        memory.taken.clear()  # a name held by a foreign object may be free again
        memory.foreign_services.clear()
        # While the index lags (a watch reconnects some time after the API answers again),
        # it lacks what this pool created meanwhile; a pass from it would count those
        # sandboxes as missing and step the status back. So list again until it caught up.
        if view.caught_up:
            memory.verified_epoch, memory.verified_at = epoch, now
        return view.children
    return [s for s in indexed if s.owner == uid and s.uid not in memory.ghosts]


def foreign_members(indexed: list[Summary], owner: str, ghosts: set[str]) -> list[str]:
    """The Services labelled for the pool that it does not control (issue 42, item 2): made by
    someone else to join the pool's discovery. Trainers never use them; the pool names them.

    >>> own = Summary("Service", "desks-0", "u1", "desks-0", owner="pool")
    >>> evil = Summary("Service", "evil", "u2", "", owner="")
    >>> foreign_members([own, evil], "pool", set()), foreign_members([own, evil], "pool", {"u2"})
    (['evil'], [])
    """
    return sorted({
        s.name for s in indexed
        if s.kind == "Service" and s.owner != owner and s.uid not in ghosts and not s.deleting
    })  # fmt: skip


@dataclass
class ListedView:
    children: list[Summary]  # the pool's own children, as listed
    ghosts: set[str]  # uids the index holds that the list lacks
    caught_up: bool  # the index holds every own child the list found, and no new ghost


def compare_with_list(
    indexed: list[Summary], listed: list[Summary], owner: str, known_ghosts: set[str]
) -> ListedView:
    """Compare an index snapshot (taken before the list) with a fresh list of the children.
    A new ghost means the index missed a deletion: its watch may still be down, so it has not
    caught up even if it holds everything listed. So does a child the index holds in another
    state than listed (say ready where the list says deleting)."""
    seen = {s.uid for s in listed}
    ghosts = {s.uid for s in indexed if s.uid not in seen}
    children = [s for s in listed if s.owner == owner]
    in_index = {s.uid: s for s in indexed if s.owner == owner}
    caught_up = ghosts <= known_ghosts and all(in_index.get(s.uid) == s for s in children)
    return ListedView(children, ghosts, caught_up)


async def not_installed(
    api: Kube, backend: backends.Backend, memory: PoolMemory
) -> tuple[str, str] | None:
    """What the cluster lacks for the backend, if anything (asked at most once a minute)."""
    if time.monotonic() - memory.installed_checked_at >= 60:
        memory.not_installed = await call(backend.not_installed, api)
        memory.installed_checked_at = time.monotonic()
    return memory.not_installed


async def current_body(api: Kube, body: Obj, memory: PoolMemory) -> Obj | None:
    """The pool as its watch last showed it, except after the API was unreachable: that watch
    lags as the children's do, so the pool is read from the API, and a spec changed meanwhile
    (a scale-in) does not wait for the watch. The newer spec (metadata.generation) wins until the
    watch has caught up. None when the pool is gone or replaced: a watch that resumed with a
    list (410 Gone) never tells of a deletion, so the loop must notice itself."""
    meta = body["metadata"]
    if memory.verified_epoch != HEALTH.epoch:
        # A list, not a get: the operator may list and watch pools, not get them.
        found = await call(
            api.list, "SandboxPool", meta["namespace"], "", f"metadata.name={meta['name']}"
        )
        fresh = found[0] if found else None
        if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
            memory.gone = True
            return None
        memory.fetched = fresh
    fetched = memory.fetched
    if fetched is not None and generation(fetched) > generation(body):
        return fetched
    memory.fetched = None
    return body


def generation(body: Obj) -> int:
    return int(body["metadata"].get("generation") or 0)
