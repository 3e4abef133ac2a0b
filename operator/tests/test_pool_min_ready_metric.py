"""kubecua_pool_min_ready{namespace,pool} on the operator's /metrics, from real TrainingRuns on the
real control plane: the largest minReady among the pool's unfinished runs, 0 when none.
The chart's KubecuaPoolDegraded alert compares it with kubecua_pool_sandboxes{state="ready"}.
"""

from __future__ import annotations

from .conftest import wait_until
from .helpers import pool_manifest, wait_pool
from .test_trainingrun_lifecycle import run_manifest


def named(manifest: dict, name: str) -> dict:
    manifest["metadata"]["name"] = name
    return manifest


def phase(kube, namespace: str, name: str) -> str:
    return ((kube.get("TrainingRun", namespace, name) or {}).get("status") or {}).get("phase", "")


def test_pool_min_ready_is_the_largest_demand_of_unfinished_runs(kube, operator, namespace):
    def min_ready() -> float:
        return operator.metric("kubecua_pool_min_ready", namespace=namespace, pool="desks")

    def becomes(value: float) -> None:
        wait_until(lambda: min_ready() == value, 60, f"kubecua_pool_min_ready == {value}")

    kube.create(pool_manifest("desks", namespace, 1))
    wait_pool(kube, namespace, "desks", ready=1)
    head = f'kubecua_pool_min_ready{{namespace="{namespace}",pool="desks"}} 0.0'
    wait_until(lambda: head in operator.scrape(), 30, "the series of a pool no run uses, at 0")

    # Both wait (1 ready sandbox): unfinished runs, each asking for more than the pool has.
    kube.create(
        named(run_manifest(namespace, sandboxes={"poolRef": "desks", "minReady": 3}), "big")
    )
    kube.create(
        named(run_manifest(namespace, sandboxes={"poolRef": "desks", "minReady": 2}), "mid")
    )
    becomes(3)

    # "big" now fits, starts, and kwok completes its pod: a finished run asks for nothing.
    kube.patch("TrainingRun", namespace, "big", {"spec": {"sandboxes": {"minReady": 1}}})
    wait_until(lambda: phase(kube, namespace, "big") == "Succeeded", 60, "run big Succeeded")
    becomes(2)

    kube.delete("TrainingRun", namespace, "mid")
    becomes(0)
