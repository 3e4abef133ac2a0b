"""The run's curves as one PNG of separate panels, so no curve hides another: training reward
(the evaluator's score and the shaped reward GRPO trained on, side by side), training success
rate, and, once a run evaluates, held-out success rate by step (with the episode count and a 95%
interval behind each point) and pass@k. The held-out panel is also written alone as SVG
(`held_out_svg`), which the report shows inline: its line and points carry ids (held-out-line,
eval-step-N, untrained) that a browser can find.

The held-out panel spans the whole run (step 0 to the last step), so one evaluation is a point
on that axis, not alone on an axis of its own; the run's evaluations are joined by a line, and
its first one is marked apart (step 0: the untrained model, or the warm-up's result when the run
warmed up). An evaluation of the untrained model before the warm-up (make demo's:
spec.evaluation.beforeWarmup; see report/__init__.py) is its own hollow marker at step 0, not
joined to the line."""

from __future__ import annotations

import io
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

    At 0 and n successes the bound on that side is exactly 0 or 1 (in floating point the
    formula gives 0.9999999999999999 for 60 of 60, which left a negative error bar):
    >>> wilson_interval(60, 60)[1], wilson_interval(0, 60)[0]
    (1.0, 0.0)
    """
    if n <= 0:
        return 0.0, 1.0
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return lo, hi


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    matplotlib.rcParams["svg.hashsalt"] = "kubecua"  # the same SVG ids every render
    import matplotlib.pyplot as plt

    return plt


def plot_curves(
    history: list[dict[str, Any]],
    evaluations: list[dict[str, Any]],
    path: Path,
    untrained: dict[str, Any] | None = None,
    warmed_up: bool = False,
) -> None:
    """Write `path`: two panels for training, two more when there are evaluations (summary.json
    dicts of contracts' evaluation layout). untrained: the summary of an evaluation of the model
    before any training made outside the run; warmed_up: the run's step 0 is the warm-up's."""
    plt = _pyplot()
    rows = 2 if evaluations else 1
    fig, axes = plt.subplots(
        rows, 2, figsize=(2 * PANEL_INCHES[0], rows * PANEL_INCHES[1]), dpi=DPI, squeeze=False
    )
    steps = [r["step"] for r in history]
    _panel(axes[0][0], "training reward mean", steps,
           {"evaluator score": [r.get("reward_mean") for r in history],
            "shaped (trained on)": [r.get("shaped_reward_mean") for r in history]})  # fmt: skip
    _panel(axes[0][1], "training success rate", steps,
           {"success rate": [r.get("success_rate") for r in history]})  # fmt: skip
    if evaluations:
        last = max([*steps, *(int(e["step"]) for e in evaluations)])
        _held_out(axes[1][0], evaluations, last, untrained, warmed_up)
        _pass_at_k(axes[1][1], evaluations)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def held_out_svg(
    evaluations: list[dict[str, Any]],
    last_step: int,
    untrained: dict[str, Any] | None = None,
    warmed_up: bool = False,
) -> str:
    """The held-out panel alone, as an <svg> element to put inline in a page."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(PANEL_INCHES[0] * 1.2, PANEL_INCHES[1] * 1.2), dpi=DPI)
    _held_out(ax, evaluations, last_step, untrained, warmed_up)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # without the XML declaration and DOCTYPE


def _panel(ax: Any, title: str, steps: list[int], series: dict[str, list[Any]]) -> None:
    drawn = 0
    for label, values in series.items():
        points = [(s, v) for s, v in zip(steps, values, strict=True) if isinstance(v, int | float)]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
            drawn += 1
    if drawn > 1:
        ax.legend(fontsize=8)
    _style(ax, title)


def _interval(e: dict[str, Any]) -> tuple[float, float]:
    """(below, above) the rate: the 95% Wilson interval's distances."""
    lo, hi = wilson_interval(round(e["success_rate"] * e["scored"]), e["scored"])
    # never below 0: matplotlib refuses a negative error bar (the rate is a rounded float)
    return max(0.0, e["success_rate"] - lo), max(0.0, hi - e["success_rate"])


def _held_out(
    ax: Any,
    evaluations: list[dict[str, Any]],
    last_step: int,
    untrained: dict[str, Any] | None,
    warmed_up: bool,
) -> None:
    # success_rate is null where every episode was excluded: no point to draw
    done = [e for e in evaluations if isinstance(e.get("success_rate"), int | float)]
    steps = [e["step"] for e in done]
    rates = [e["success_rate"] for e in done]
    if done:
        bars = [list(side) for side in zip(*map(_interval, done), strict=True)]
        drawn = ax.errorbar(steps, rates, yerr=bars, marker="o", markersize=5,
                            capsize=3, color="C0", label="this run")  # fmt: skip
        drawn.lines[0].set_gid("held-out-line")
        first = ""  # what the run's step 0 evaluated
        if steps[0] == 0:
            first = "after warm-up" if warmed_up else "untrained"
        for s, r, e in zip(steps, rates, done, strict=True):
            label = f"n={e['scored']}" + (f", {first}" if s == steps[0] and first else "")
            text = ax.annotate(label, (s, r), textcoords="offset points", xytext=(5, 6),
                               fontsize=8)  # fmt: skip
            text.set_gid(f"eval-step-{s}")
        if steps[0] == 0:  # the start, marked apart from the line's other points
            start = ax.plot([0], [rates[0]], marker="D", markersize=9, color="C0",
                            fillstyle="none", linestyle="none")  # fmt: skip
            start[0].set_gid("start")
    span = max(last_step, 1)
    if untrained is not None and isinstance(untrained.get("success_rate"), int | float):
        # a little left of step 0, so that it never hides the run's own step-0 point
        x = -0.06 * span - 0.1
        low, high = _interval(untrained)
        point = ax.errorbar([x], [untrained["success_rate"]], yerr=[[low], [high]],
                            marker="s", markersize=8, fillstyle="none", color="C3", capsize=3,
                            linestyle="none", label="untrained model")  # fmt: skip
        point.lines[0].set_gid("untrained")
        ax.annotate(f"untrained, n={untrained['scored']}", (x, untrained["success_rate"]),
                    textcoords="offset points", xytext=(5, -12), fontsize=8,
                    color="C3")  # fmt: skip
    if untrained is not None or (warmed_up and done):
        ax.legend(fontsize=8, loc="upper left")
    _style(ax, "held-out success rate (95% interval, n = scored episodes)")
    # The whole run's steps, so that a lone step-0 evaluation is not a point on an axis of its own
    ax.set_xlim(-0.1 * span - 0.3, last_step + 0.05 * span + 0.3)


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
