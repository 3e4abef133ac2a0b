"""Fleet dashboard: the sandboxes of every pool (states, leases) and what the episode servers see
(step and reset latency, setup failures)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from kubecua_dashboards.panels import NS, base, graph, latency_heatmap, row, stacked

POOL = "kubecua_pool_sandboxes"
S = "kubecua_sandbox_"


def build() -> db.Dashboard:
    d = base("kubecua-fleet", "kubecua / Fleet", "Sandbox pools and episode servers.")
    d = d.with_row(row("Pools"))
    d = d.with_panel(
        stacked(
            "Sandboxes by state per pool",
            "pending, ready, failed and terminating sandboxes, from the operator (ready includes "
            "the leased ones; see Leased versus idle).",
            [("{{pool}} {{state}}", f'sum by (pool, state) ({POOL}{{{NS}, state!="leased"}})')],
        )
    )
    d = d.with_panel(
        graph(
            "Leased versus idle",
            "Leased: ready and running an episode. Idle: ready and free (the warm spares).",
            [
                ("{{pool}} leased", f'sum by (pool) ({POOL}{{{NS}, state="leased"}})'),
                (
                    "{{pool}} idle",
                    f'sum by (pool) ({POOL}{{{NS}, state="ready"}})'
                    f' - sum by (pool) ({POOL}{{{NS}, state="leased"}})',
                ),
            ],
        )
    )
    d = d.with_row(row("Episode servers"))
    d = d.with_panel(
        latency_heatmap(
            "Step latency", "Action to settled observation, per step.", f"{S}step_duration_seconds"
        )
    )
    d = d.with_panel(
        latency_heatmap(
            "Reset latency", "Release to verified clean, per reset.", f"{S}reset_duration_seconds"
        )
    )
    d = d.with_panel(
        stacked(
            "Setup failures by reason",
            "Task setups that failed per second, by reason (these episodes are never trained).",
            [
                (
                    "{{reason}}",
                    f"sum by (reason) (rate({S}setup_failures_total{{{NS}}}[$__rate_interval]))",
                )
            ],
            "ops",
        )
    )
    return d.with_panel(
        stacked(
            "Episodes by outcome (sandbox side)",
            "Finished episodes per second as the episode servers count them.",
            [
                (
                    "{{outcome}}",
                    f"sum by (outcome) (rate({S}episodes_total{{{NS}}}[$__rate_interval]))",
                )
            ],
            "ops",
        )
    )
