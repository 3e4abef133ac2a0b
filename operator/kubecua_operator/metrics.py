"""Operator metrics on /metrics: reconciles, their duration and errors, API requests, sandboxes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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
SANDBOX_STATES = ("pending", "ready", "leased", "failed", "terminating")


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
    for state in SANDBOX_STATES:
        POOL_SANDBOXES.labels(namespace, pool, state).set(counts.get(state, 0))


def forget_pool(namespace: str, pool: str) -> None:
    for state in SANDBOX_STATES:
        with contextlib.suppress(KeyError):
            POOL_SANDBOXES.remove(namespace, pool, state)


def start_server(port: int, host: str) -> None:
    """Serve /metrics; port 0 turns it off (tests that run several operators)."""
    if port:
        start_http_server(port, addr=host)
