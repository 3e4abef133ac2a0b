"""Draw a dashboard's panels as one PNG from series already fetched from Prometheus, so a reader
of docs/ sees what the Grafana dashboard shows without running Grafana.

    python -m kubecua_dashboards.render_png SERIES.json OUT.png

SERIES.json: {"title": str, "panels": [{"title": str, "unit": str,
                                         "series": [{"label": str, "points": [[t, v], ...]}]}]}
with t in seconds from the start of the window. Leaves out: Grafana's own styling and heatmaps
(panels are drawn as lines).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: write files only
import matplotlib.pyplot as plt


def render(spec: dict[str, Any], out: Path, columns: int = 3) -> int:
    """Write the PNG; returns how many series were drawn (panels without data say so)."""
    panels = spec["panels"]
    rows = max(1, math.ceil(len(panels) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.4 * rows), squeeze=False)
    drawn = 0
    for ax, panel in zip(axes.flat, panels, strict=False):
        for series in panel["series"]:
            if series["points"]:
                xs, ys = zip(*series["points"], strict=True)
                ax.plot(xs, ys, label=series["label"], linewidth=1.5)
                drawn += 1
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.set_ylabel(panel.get("unit", ""), fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.has_data():
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(spec["title"])
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return drawn


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    drawn = render(json.loads(Path(args[0]).read_text()), Path(args[1]))
    print(f"drew {drawn} series into {args[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
