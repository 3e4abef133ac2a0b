"""The run's curves as one PNG of separate panels, so no curve hides another: training reward
mean, training success rate, and, once a run evaluates, held-out success rate by step (with the
episode count and a 95% interval behind each point) and pass@k."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

PANEL_INCHES = (5.0, 3.0)
DPI = 100


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate: honest at small n and at 0 or 1.

    Worked example: 2 successes in 4 episodes, p = 0.5, z^2/n = 0.9604:
    centre = (0.5 + 0.4802) / 1.9604 = 0.5, half-width = 1.96 * sqrt(0.0625 + 0.0600) / 1.9604
    = 0.3498, so (0.150, 0.850): four episodes cannot tell 50% from 20% or 80%.
    >>> tuple(round(v, 3) for v in wilson_interval(2, 4))
    (0.15, 0.85)
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if n <= 0:
        return 0.0, 1.0
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def plot_curves(
    history: list[dict[str, Any]], evaluations: list[dict[str, Any]], path: Path
) -> None:
    """Write `path`: two panels for training, two more when there are evaluations (summary.json
    dicts of contracts' evaluation layout)."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    rows = 2 if evaluations else 1
    fig, axes = plt.subplots(
        rows, 2, figsize=(2 * PANEL_INCHES[0], rows * PANEL_INCHES[1]), dpi=DPI, squeeze=False
    )
    steps = [r["step"] for r in history]
    _panel(axes[0][0], "training reward mean", steps, [r.get("reward_mean") for r in history])
    _panel(axes[0][1], "training success rate", steps, [r.get("success_rate") for r in history])
    if evaluations:
        _held_out(axes[1][0], evaluations)
        _pass_at_k(axes[1][1], evaluations)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _panel(ax: Any, title: str, steps: list[int], values: list[Any]) -> None:
    points = [(s, v) for s, v in zip(steps, values, strict=True) if isinstance(v, int | float)]
    if points:
        ax.plot(*zip(*points, strict=True), marker="o", markersize=3)
    _style(ax, title)


def _held_out(ax: Any, evaluations: list[dict[str, Any]]) -> None:
    # success_rate is null where every episode was excluded: no point to draw
    done = [e for e in evaluations if isinstance(e.get("success_rate"), int | float)]
    steps = [e["step"] for e in done]
    rates = [e["success_rate"] for e in done]
    below, above = [], []
    for e in done:
        lo, hi = wilson_interval(round(e["success_rate"] * e["scored"]), e["scored"])
        below.append(e["success_rate"] - lo)
        above.append(hi - e["success_rate"])
    if done:
        ax.errorbar(steps, rates, yerr=[below, above], marker="o", markersize=4, capsize=3)
    for s, r, e in zip(steps, rates, done, strict=True):
        ax.annotate(f"n={e['scored']}", (s, r), textcoords="offset points", xytext=(4, 6),
                    fontsize=8)  # fmt: skip
    _style(ax, "held-out success rate (95% interval, n = scored episodes)")


def _pass_at_k(ax: Any, evaluations: list[dict[str, Any]]) -> None:
    ks = sorted({int(k) for e in evaluations for k in e.get("pass_at_k") or {}})
    drawn = False
    for k in ks:
        values = [(e["step"], (e.get("pass_at_k") or {}).get(str(k))) for e in evaluations]
        points = [(s, v) for s, v in values if isinstance(v, int | float)]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=f"pass@{k}")
            drawn = True
    if drawn:
        ax.legend(fontsize=8)
    _style(ax, "held-out pass@k")


def _style(ax: Any, title: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if "reward" not in title:  # rates live in [0, 1]; a reward's scale is the task's
        ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
