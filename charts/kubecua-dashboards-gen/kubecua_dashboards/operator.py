"""Operator dashboard: how often it reconciles, how often that fails, and how long it takes."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from kubecua_dashboards.panels import NS, base, graph, quantiles

OP = "kubecua_operator_"


def build() -> db.Dashboard:
    d = base("kubecua-operator", "kubecua / Operator", "The kopf operator's reconcile loop.")
    rate = "[$__rate_interval]"
    d = d.with_panel(
        graph(
            "Reconcile rate",
            "Reconciles per second, by kind (SandboxPool, TrainingRun).",
            [("{{kind}}", f"sum by (kind) (rate({OP}reconcile_total{{{NS}}}{rate}))")],
            "ops",
        )
    )
    d = d.with_panel(
        graph(
            "Reconcile errors",
            "Reconciles that raised, per second and as a share of all reconciles.",
            [
                (
                    "{{kind}} errors/s",
                    f"sum by (kind) (rate({OP}reconcile_errors_total{{{NS}}}{rate}))",
                ),
                (
                    "{{kind}} error ratio",
                    f"sum by (kind) (rate({OP}reconcile_errors_total{{{NS}}}{rate}))"
                    f" / sum by (kind) (rate({OP}reconcile_total{{{NS}}}{rate}))",
                ),
            ],
        )
    )
    d = d.with_panel(
        graph(
            "Reconcile duration",
            "Wall time of one reconcile (p50/p90/p99), by kind.",
            quantiles(f"{OP}reconcile_duration_seconds", "kind", (0.5, 0.9, 0.99)),
            "s",
        )
    )
    return d.with_panel(
        graph(
            "API requests",
            "Kubernetes API requests the operator issues, per second, by verb.",
            [("{{verb}}", f"sum by (verb) (rate({OP}api_requests_total{{{NS}}}{rate}))")],
            "reqps",
        )
    )
