"""Runs that size their pool (issue 22): a TrainingRun's spec.sandboxes.capacity raises its pool up
to the pool's spec.maxReplicas, two runs' demands add up, a demand the maximum cannot meet shows
as DemandMet=False on the pool and on the runs, and finishing or suspending a run gives the
capacity back, by idle sandboxes only: no sandbox is removed in the middle of an episode.

The pool is external: its sandboxes are real HTTP episode servers on 127.0.0.1 (EpisodeStub),
whose busy flag the operator polls, so leases are real; kwok pods run no episode server. The
trainers get an unschedulable CPU request (kwok never runs them) and this test ends one by
writing its pod's phase, as a kubelet would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from kubecua_operator.k8s import Kube

from .conftest import wait_until
from .episode_stub import EpisodeStub
from .helpers import condition, live, pool_manifest, pool_status, set_pod_status, wait_pool

MAX = 5
OFF_NODES = {"resources": {"requests": {"cpu": "100000"}}}  # no kwok node fits: kwok leaves it


@pytest.fixture
def stubs() -> Iterator[list[EpisodeStub]]:
    servers = [EpisodeStub(token="t0ken") for _ in range(MAX)]
    yield servers
    for s in servers:
        s.close()


class Removals:
    """When each sandbox's EndpointSlice was removed (its deletion first seen by a watch), in
    time.monotonic() like the episode servers' records; removing it unpublishes the sandbox."""

    def __init__(self, api: client.ApiClient, namespace: str, pool: str) -> None:
        self.at: dict[str, float] = {}
        self._watch = watch.Watch()
        self._thread = threading.Thread(
            target=self._run,
            args=(client.DiscoveryV1Api(api), namespace, f"kubecua.dev/pool={pool}"),
            daemon=True,
        )
        self._thread.start()

    def _run(self, api: client.DiscoveryV1Api, namespace: str, selector: str) -> None:
        stream = self._watch.stream(
            api.list_namespaced_endpoint_slice, namespace, label_selector=selector
        )
        for event in stream:
            meta = event["object"].metadata
            if event["type"] == "DELETED" or meta.deletion_timestamp:
                self.at.setdefault(meta.name, time.monotonic())

    def stop(self) -> None:
        self._watch.stop()


@pytest.fixture
def removals(cluster: Any, namespace: str) -> Iterator[Removals]:
    seen = Removals(cluster.api_client(), namespace, "ext")
    yield seen
    seen.stop()


def pool(namespace: str, stubs: list[EpisodeStub]) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "ext", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "maxReplicas": MAX,
            "backend": "external",
            "desktop": {"external": {"endpoints": [s.url for s in stubs]}},
        },
    }


def run(namespace: str, name: str, episodes: int, spares: int = 0) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"path": "/models/tiny"},
            "sandboxes": {
                "poolRef": "ext",
                "capacity": {"episodes": episodes, "spares": spares},
            },
            "tasks": {"configMapRef": "osworld"},
            "steps": 20,
            "trainer": OFF_NODES,
        },
    }


def published(kube: Kube, namespace: str) -> set[str]:
    """The sandboxes a trainer can find: live EndpointSlices of the pool."""
    slices = live(kube.list("EndpointSlice", namespace, "kubecua.dev/pool=ext"))
    return {s["metadata"]["name"] for s in slices}


def wait_demand(kube: Kube, namespace: str, demand: dict | None, ready: int) -> dict:
    def check() -> dict | None:
        st = pool_status(kube, namespace, "ext")
        ok = st.get("demand") == demand and st.get("readyReplicas") == ready
        return st if ok and len(published(kube, namespace)) == ready else None

    return wait_until(check, 60, f"pool demand {demand} and {ready} ready")


def run_condition(kube: Kube, namespace: str, name: str, ctype: str) -> dict:
    return condition((kube.get("TrainingRun", namespace, name) or {}).get("status") or {}, ctype)


def wait_demand_met(kube: Kube, namespace: str, runs: list[str], status: str) -> None:
    def check() -> bool:
        on_pool = condition(pool_status(kube, namespace, "ext"), "DemandMet").get("status")
        on_runs = [run_condition(kube, namespace, r, "DemandMet").get("status") for r in runs]
        return on_pool == status and on_runs == [status] * len(runs)

    wait_until(check, 60, f"DemandMet={status} on the pool and on {runs}")


def finish(kube: Kube, namespace: str, name: str) -> None:
    """The trainer exits 0: its pod Succeeded (a kubelet's write); the Job then completes."""
    pods = wait_until(
        lambda: live(kube.list("Pod", namespace, f"kubecua.dev/trainingrun={name}")), 60
    )
    set_pod_status(kube, namespace, pods[0]["metadata"]["name"], {"phase": "Succeeded"})
    wait_until(
        lambda: (kube.get("TrainingRun", namespace, name) or {}).get("status", {}).get("phase")
        == "Succeeded",
        60,
        f"run {name} Succeeded",
    )


def test_runs_size_their_pool_and_give_back_only_idle_sandboxes(
    kube, operator, namespace, stubs, removals
):
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "ext-sandbox-token", "namespace": namespace},
            "stringData": {"token": "t0ken"},
        }
    )
    kube.create(pool(namespace, stubs))
    wait_demand(kube, namespace, None, ready=1)

    # A run raises its pool: episodes + spares.
    kube.create(run(namespace, "a", episodes=2, spares=1))
    wait_demand(kube, namespace, {"sandboxes": 3, "replicas": 3,
                                  "runs": [{"name": "a", "sandboxes": 3}]}, ready=3)  # fmt: skip
    wait_demand_met(kube, namespace, ["a"], "True")
    assert kube.get("SandboxPool", namespace, "ext")["spec"]["replicas"] == 1  # never rewritten

    # Two runs sharing the pool get their summed demand.
    kube.create(run(namespace, "b", episodes=2))
    runs_ab = [{"name": "a", "sandboxes": 3}, {"name": "b", "sandboxes": 2}]
    wait_demand(kube, namespace, {"sandboxes": 5, "replicas": 5, "runs": runs_ab}, ready=5)

    # A third run's demand passes maxReplicas: DemandMet=False on the pool and on every run.
    kube.create(run(namespace, "c", episodes=1))
    wait_demand_met(kube, namespace, ["a", "b", "c"], "False")
    met = run_condition(kube, namespace, "c", "DemandMet")
    assert met["reason"] == "MaxReplicasTooLow"
    assert met["message"] == (
        "SandboxPool ext: active runs ask for 6 sandboxes (a 3, b 2, c 1) but the pool keeps 5:"
        " maxReplicas is 5"
    )
    assert pool_status(kube, namespace, "ext")["replicas"] == MAX
    kube.delete("TrainingRun", namespace, "c")
    wait_demand_met(kube, namespace, ["a", "b"], "True")

    # Episodes run on ext-3 and ext-4: scale-in would take the highest index first.
    stubs[3].start_episode()
    stubs[4].start_episode()
    wait_until(lambda: pool_status(kube, namespace, "ext").get("leasedReplicas") == 2, 30)

    # Run a finishes: its 3 go back, as the 3 idle sandboxes; the 2 leased ones stay.
    finish(kube, namespace, "a")
    wait_demand(kube, namespace, {"sandboxes": 2, "replicas": 2,
                                  "runs": [{"name": "b", "sandboxes": 2}]}, ready=2)  # fmt: skip
    assert published(kube, namespace) == {"ext-3", "ext-4"}
    assert condition(pool_status(kube, namespace, "ext"), "DemandMet")["status"] == "True"

    # Run b is suspended: no demand is left and the baseline is 1, but both sandboxes are leased:
    # the pool holds them above its target rather than end an episode.
    kube.patch("TrainingRun", namespace, "b", {"spec": {"suspend": True}})
    st = wait_until(
        lambda: (s := pool_status(kube, namespace, "ext")).get("demand") is None
        and condition(s, "Progressing").get("message") == "2 sandboxes, target 1"
        and s,
        60,
        "no demand left, two leased sandboxes held",
    )
    assert condition(st, "DemandMet") == {}
    wait_until(lambda: run_condition(kube, namespace, "b", "DemandMet") == {}, 30, "b asks none")
    assert published(kube, namespace) == {"ext-3", "ext-4"}

    # ext-4's episode ends: it goes. ext-3 is the pool's baseline of 1 and stays after its own.
    stubs[4].end_episode()
    wait_until(lambda: published(kube, namespace) == {"ext-3"}, 30, "ext-4 removed once idle")
    stubs[3].end_episode()
    wait_until(
        lambda: condition(pool_status(kube, namespace, "ext"), "Progressing").get("reason")
        == "Stable",
        30,
        "the pool stable at its baseline",
    )
    assert published(kube, namespace) == {"ext-3"}
    assert set(removals.at) == {"ext-0", "ext-1", "ext-2", "ext-4"}

    # The episode servers' records: no sandbox was removed while it played an episode.
    for index, stub in enumerate(stubs):
        removed = removals.at.get(f"ext-{index}")
        for began, ended in stub.episodes:
            assert ended is not None
            assert removed is None or not began <= removed <= ended, (index, began, removed)
    assert removals.at["ext-4"] > stubs[4].episodes[0][1]  # type: ignore[operator]


def test_a_run_raises_a_pod_pool_and_deleting_it_gives_the_pods_back(kube, operator, namespace):
    """The same on the pod backend (kwok pods, no leases): the pods follow the demand."""
    kube.create(pool_manifest("desks", namespace, 1, maxReplicas=4))
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    manifest = run(namespace, "a", episodes=3)
    manifest["spec"]["sandboxes"]["poolRef"] = "desks"
    kube.create(manifest)
    st = wait_pool(kube, namespace, "desks", ready=3, total=3)
    assert st["demand"] == {"sandboxes": 3, "replicas": 3, "runs": [{"name": "a", "sandboxes": 3}]}
    assert condition(st, "Ready")["message"] == "3/3 sandboxes ready"
    kube.delete("TrainingRun", namespace, "a")
    st = wait_pool(kube, namespace, "desks", ready=1, total=1)
    assert "demand" not in st
