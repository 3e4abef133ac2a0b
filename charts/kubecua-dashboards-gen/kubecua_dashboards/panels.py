"""Small panel builders shared by every dashboard: one Prometheus datasource variable, a namespace
filter, and time series / heatmap / stat panels from (legend, PromQL) pairs.

Queries use `$namespace` (a regex, "All" is `.*`) and `$__rate_interval`, the two Grafana variables
the Prometheus test substitutes before it evaluates every query itself.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

DATASOURCE = cm.DataSourceRef(type_val="prometheus", uid="${datasource}")
NS = 'namespace=~"$namespace"'  # every query filters on the namespace variable
Series = list[tuple[str, str]]  # (legend format, PromQL expression)


def base(uid: str, title: str, description: str) -> db.Dashboard:
    """A dashboard with the datasource and namespace variables, refreshing every 30 s."""
    ns = (
        db.QueryVariable("namespace")
        .label("Namespace")
        .datasource(DATASOURCE)
        .query("label_values(namespace)")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .all_value(".*")
        .multi(True)
    )
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["kubecua"])
        .editable()
        .refresh("30s")
        .time("now-6h", "now")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(ns)
    )


def _queries(
    series: Series, fmt: pm.PromQueryFormat | None = None
) -> list[cogbuilder.Builder[variants.Dataquery]]:
    out: list[cogbuilder.Builder[variants.Dataquery]] = []
    for i, (legend, expr) in enumerate(series):
        q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i))
        out.append(q.format(fmt) if fmt else q)
    return out


def graph(title: str, description: str, series: Series, unit: str = "short") -> timeseries.Panel:
    """Lines over time, one per (legend, expr)."""
    return (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_queries(series))
        .unit(unit)
        .span(12)
        .height(8)
        .fill_opacity(10)
        .legend(cb.VizLegendOptions().show_legend(True).display_mode(cm.LegendDisplayMode.TABLE))
    )


def stacked(title: str, description: str, series: Series, unit: str = "short") -> timeseries.Panel:
    """Stacked areas: parts of a whole (sandboxes by state, episodes by outcome)."""
    panel = graph(title, description, series, unit).fill_opacity(60)
    return panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))


def latency_heatmap(title: str, description: str, metric: str) -> heatmap.Panel:
    """A heatmap of a Prometheus histogram: bucket rates per `le`, as Grafana expects them."""
    expr = f"sum by (le) (rate({metric}_bucket{{{NS}}}[$__rate_interval]))"
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_queries([("{{le}}", expr)], pm.PromQueryFormat.HEATMAP))
        .calculate(False)
        .span(12)
        .height(8)
        .unit("s")
    )


def single(title: str, description: str, expr: str, unit: str = "short") -> stat.Panel:
    """One number (the latest value), e.g. the current step or checkpoint age."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_queries([("{{namespace}} {{pod}}", expr)]))
        .unit(unit)
        .span(6)
        .height(4)
    )


def quantiles(metric: str, by: str = "", qs: tuple[float, ...] = (0.5, 0.9)) -> Series:
    """p50/p90 of a histogram, e.g. quantiles("x_seconds") -> [("p50", ...), ("p90", ...)]."""
    group = f"le, {by}" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    rate = f"sum by ({group}) (rate({metric}_bucket{{{NS}}}[$__rate_interval]))"
    return [(f"{prefix}p{round(q * 100)}", f"histogram_quantile({q}, {rate})") for q in qs]


def row(title: str) -> db.Row:
    return db.Row(title)
