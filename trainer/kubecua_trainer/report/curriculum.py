"""The report's curriculum section (templates/_curriculum.html.j2): the distribution of the
training tasks' running pass rates (rollout/curriculum.py) after the last step, from
curriculum.json, which each step of a run with spec.tasks.curriculum rewrites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILE = "curriculum.json"


def save_curriculum(out_dir: Path, step: int, summary: dict[str, Any]) -> None:
    """Replace curriculum.json (a reader never sees half of it)."""
    path = Path(out_dir) / FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, **summary}, indent=1))
    tmp.replace(path)


def curriculum_view(out_dir: Path) -> dict[str, Any] | None:
    """None in a run without a curriculum; else the summary with the histogram's bars scaled to
    the largest bin (percent of the bar's width)."""
    path = Path(out_dir) / FILE
    if not path.is_file():
        return None
    view = dict(json.loads(path.read_text()))
    top = max(view["histogram"]) or 1
    view["bars"] = [
        {"range": f"{i / 10:.1f}-{(i + 1) / 10:.1f}", "tasks": n, "width": round(100 * n / top)}
        for i, n in enumerate(view["histogram"])
    ]
    return view
