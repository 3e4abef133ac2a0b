"""The last lines of `make demo`: held-out success untrained, after the warm-up and after GRPO,
each with the number of episodes behind it, and where the curves and the report are. Reads what
the run wrote (<out>/evaluations/history.jsonl, one line per evaluated step, and the same under
<out>/untrained); prints nothing it did not find.

    .venv/bin/python -m bench.learning.summary ../out/demo
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate.

    >>> tuple(round(x, 3) for x in wilson(3, 30))
    (0.035, 0.256)
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def line(e: dict[str, Any]) -> str:
    n = int(e["scored"])
    k = round(e["success_rate"] * n)
    lo, hi = wilson(k, n)
    excluded = f", {e['excluded']} excluded" if e.get("excluded") else ""
    return (
        f"step {e['step']}: {k}/{n} episodes = {e['success_rate']:.0%} "
        f"(95% interval {lo:.0%}-{hi:.0%}{excluded})"
    )


def history(out: Path) -> list[dict[str, Any]]:
    path = out / "evaluations" / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def summary(out: Path) -> list[str]:
    """The untrained model's figure (<out>/untrained, when `make demo` evaluated it), then the
    run's first evaluation (after the warm-up) and its last."""
    evals = history(out)
    if not evals:
        return [f"no evaluation found ({out / 'evaluations/history.jsonl'} is missing)"]
    lines = ["held-out success (tasks never trained on, greedy):"]
    untrained = history(out / "untrained")
    if untrained:
        lines.append(f"  untrained model: {line(untrained[0]).split(': ', 1)[1]}")
    labels = ["after the warm-up" if evals[0]["step"] == 0 else "first evaluation", "after GRPO"]
    shown = (evals[0], evals[-1]) if len(evals) > 1 else (evals[0],)
    lines += [f"  {labels[i]}, {line(e)}" for i, e in enumerate(shown)]
    for name in ("curves.png", "report.html"):
        if (out / name).exists():
            lines.append(f"{name.split('.')[0]}: {out / name}")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the run's output folder")
    print("\n".join(summary(p.parse_args(argv).out)))


if __name__ == "__main__":
    main()
