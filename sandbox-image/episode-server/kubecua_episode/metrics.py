"""Prometheus metrics (kubecua_sandbox_ prefix, base units, bounded labels only)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.step_duration = Histogram(
            "kubecua_sandbox_step_duration_seconds",
            "Action to observation, settle included",
            registry=r,
            buckets=BUCKETS,
        )
        self.settle_duration = Histogram(
            "kubecua_sandbox_settle_duration_seconds",
            "Time spent waiting for the screen to settle after an action",
            registry=r,
            buckets=BUCKETS,
        )
        self.reset_duration = Histogram(
            "kubecua_sandbox_reset_duration_seconds", "Release to verified clean", registry=r,
            buckets=BUCKETS,
        )  # fmt: skip
        self.setup_duration = Histogram(
            "kubecua_sandbox_setup_duration_seconds", "Task setup (desktop-env SetupController)",
            registry=r, buckets=BUCKETS,
        )  # fmt: skip
        self.evaluate_duration = Histogram(
            "kubecua_sandbox_evaluate_duration_seconds", "desktop-env evaluation", registry=r,
            buckets=BUCKETS,
        )  # fmt: skip
        # Its _sum is every second this sandbox was leased, what a trainer's cost accounting
        # (trainer/kubecua_trainer/telemetry/cost.py) must agree with; its _count the leases.
        self.lease_duration = Histogram(
            "kubecua_sandbox_lease_duration_seconds",
            "Episode start request to verified reset after its release (setup failures too)",
            registry=r,
            buckets=(*BUCKETS, 256.0, 512.0, 1024.0),
        )
        self.episodes = Counter(
            "kubecua_sandbox_episodes_total",
            "Finished episodes by outcome (success, failure, unscored, setup_failed, abandoned)",
            ["outcome"],
            registry=r,
        )
        self.setup_failures = Counter(
            "kubecua_sandbox_setup_failures_total",
            "Task setups that failed, by reason",
            ["reason"],
            registry=r,
        )
        self.partial_failures = Counter(
            "kubecua_sandbox_partial_failures_total",
            "Evaluations whose task-declared partial metric failed (the score stands)",
            registry=r,
        )
        self.reset_failures = Counter(
            "kubecua_sandbox_reset_failures_total",
            "Releases whose reset or clean-check failed (the sandbox is then not ready)",
            registry=r,
        )
        self.busy = Gauge("kubecua_sandbox_busy", "1 while an episode runs", registry=r)
        self.ready = Gauge("kubecua_sandbox_ready", "1 when verified clean and ready", registry=r)
