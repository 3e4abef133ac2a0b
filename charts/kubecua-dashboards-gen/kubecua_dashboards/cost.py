"""The training dashboard's Cost row: what the runs cost in sandbox-seconds and GPU-seconds, per
trajectory and per successful trajectory, and in money where a run's spec.cost sets prices.

The trainer exports the whole run's totals as gauges (kubecua_trainer_run_*, counting the run's
earlier pods too: kubecua_trainer/telemetry/metrics.py); the per-trajectory figures are divisions
here. Before a run's first success its per-success lines read +Inf, as the cost of a success
not yet had. GPU-seconds per success is left to status.cost and the report: on a CPU run it is
0/0, a line of nothing.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from kubecua_dashboards.panels import NS, graph, row, single

T = "kubecua_trainer_run_"
BY_POD = "{{namespace}} {{pod}}"


def per(numerator: str, denominator: str) -> str:
    """A run total over a run count, matched by pod: per("sandbox_seconds", "trajectories")."""
    return f"{T}{numerator}{{{NS}}} / ignoring(currency) group_left {T}{denominator}{{{NS}}}"


def cost_row(d: db.Dashboard) -> db.Dashboard:
    d = d.with_row(row("Cost"))
    d = d.with_panel(
        graph(
            "Cost per trajectory",
            "Sandbox-seconds leased and GPU-seconds held by each run so far (training and"
            " evaluation episodes, start-up included), per training trajectory and per"
            " successful one (+Inf before the first success).",
            [
                (f"{BY_POD} sandbox-s / trajectory", per("sandbox_seconds", "trajectories")),
                (f"{BY_POD} GPU-s / trajectory", per("gpu_seconds", "trajectories")),
                (
                    f"{BY_POD} sandbox-s / success",
                    per("sandbox_seconds", "successful_trajectories"),
                ),
            ],
            "s",
        )
    )
    d = d.with_panel(
        graph(
            "Money per successful trajectory",
            "A run's cost at its spec.cost prices (absent without them), per trajectory and per"
            " successful trajectory.",
            [
                (f"{BY_POD} {{{{currency}}}} / trajectory", per("cost", "trajectories")),
                (f"{BY_POD} {{{{currency}}}} / success", per("cost", "successful_trajectories")),
            ],
        )
    )
    return d.with_panel(
        single(
            "Sandbox-hours leased",
            "Sandbox-hours the selected runs have leased so far.",
            f"sum({T}sandbox_seconds{{{NS}}}) / 3600",
        )
    )
