"""Operator metrics on /metrics: reconciles, their duration and errors, API requests, sandboxes,
and each pool's demand (kubecua_pool_min_ready, which the KubecuaPoolDegraded alert compares with
the ready sandboxes)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

RECONCILES = Counter("kubecua_operator_reconcile_total", "Reconciles run, by kind.", ["kind"])
RECONCILE_ERRORS = Counter(
    "kubecua_operator_reconcile_errors_total", "Reconciles that raised, by kind.", ["kind"]
)
RECONCILE_SECONDS = Histogram(
    "kubecua_operator_reconcile_duration_seconds",
    "Wall time of one reconcile, by kind.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
API_REQUESTS = Counter(
    "kubecua_operator_api_requests_total", "Kubernetes API requests issued, by verb.", ["verb"]
)
POOL_SANDBOXES = Gauge(
    "kubecua_pool_sandboxes",
    "Sandboxes of a pool by state (pending, ready, leased, failed, terminating).",
    ["namespace", "pool", "state"],
)
WATCH_UP = Gauge(
    "kubecua_operator_watch_up",
    "1 while a watch stream of the operator is listed and watching, 0 while it is down.",
    ["watch"],
)
WATCH_RESTARTS = Counter(
    "kubecua_operator_watch_restarts_total",
    "Watch streams that failed and were started again (list, then watch), by stream.",
    ["watch"],
)
SANDBOX_STATES = ("pending", "ready", "leased", "failed", "terminating")


class PoolDemand:
    """kubecua_pool_min_ready{namespace,pool}: the largest spec.sandboxes.minReady among the
    unfinished TrainingRuns bound to a pool, 0 for a pool no such run uses.

    Computed at scrape time from what the run loops last reported, so a run that finishes, is
    deleted or changes its minReady moves the value at once, with no per-pool gauge to keep in step.
    E.g. runs a (minReady 3, Running) and b (minReady 5, Succeeded) on pool p: p's value is 3.
    """

    def __init__(self) -> None:
        self.pools: set[tuple[str, str]] = set()  # (namespace, pool) of the live pool loops
        self.runs: dict[tuple[str, str], tuple[str, int]] = {}  # (ns, run) -> (pool, minReady)

    def values(self) -> dict[tuple[str, str], int]:
        out = dict.fromkeys(self.pools, 0)
        for (namespace, _run), (pool, need) in list(self.runs.items()):
            out[(namespace, pool)] = max(out.get((namespace, pool), 0), need)
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kubecua_pool_min_ready",
            "Largest sandboxes.minReady of the unfinished TrainingRuns using the pool.",
            labels=["namespace", "pool"],
        )
        for (namespace, pool), need in sorted(self.values().items()):
            family.add_metric([namespace, pool], need)
        yield family


POOL_DEMAND = PoolDemand()
REGISTRY.register(POOL_DEMAND)  # type: ignore[arg-type]  # a duck-typed collector


def set_run_demand(namespace: str, run: str, pool: str | None, min_ready: int | None) -> None:
    """What a run asks of its pool; pool or min_ready None (no pool, or finished) drops it."""
    if pool is None or min_ready is None:
        POOL_DEMAND.runs.pop((namespace, run), None)
    else:
        POOL_DEMAND.runs[(namespace, run)] = (pool, min_ready)


@contextmanager
def timed_reconcile(kind: str) -> Iterator[None]:
    started = time.perf_counter()
    RECONCILES.labels(kind).inc()
    try:
        yield
    except Exception:
        RECONCILE_ERRORS.labels(kind).inc()
        raise
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - started)


def set_pool_sandboxes(namespace: str, pool: str, counts: dict[str, int]) -> None:
    POOL_DEMAND.pools.add((namespace, pool))
    for state in SANDBOX_STATES:
        POOL_SANDBOXES.labels(namespace, pool, state).set(counts.get(state, 0))


def forget_pool(namespace: str, pool: str) -> None:
    POOL_DEMAND.pools.discard((namespace, pool))
    for state in SANDBOX_STATES:
        with contextlib.suppress(KeyError):
            POOL_SANDBOXES.remove(namespace, pool, state)


def start_server(port: int, host: str) -> None:
    """Serve /metrics; port 0 turns it off (tests that run several operators)."""
    if port:
        start_http_server(port, addr=host)
