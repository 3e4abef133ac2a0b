"""The report's live-view section (templates/_live_view.html.j2): the sandboxes the latest step's
episodes ran on, each with the commands that show its desktop (telemetry/liveview.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubecua_trainer.telemetry.liveview import read_sandboxes, watch


def live_view(out_dir: Path, step_file: Path | None) -> dict[str, Any] | None:
    """None unless the run's episodes ran on a pool's sandboxes (sandboxes.json)."""
    known = read_sandboxes(out_dir)
    if known is None or step_file is None or not step_file.exists():
        return None
    names, ns, pool = known["names"], known["namespace"], known["pool"]
    episodes: dict[str, list[str]] = {}
    for line in step_file.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if row.get("sandbox") in names:
            episodes.setdefault(names[row["sandbox"]], []).append(row["key"])
    sandboxes = [
        {**watch(ns, name, pool), "episodes": keys} for name, keys in sorted(episodes.items())
    ]
    return {"sandboxes": sandboxes, "page": sandboxes[0]["url"] if sandboxes else None,
            "token": sandboxes[0]["token"] if sandboxes else None}  # fmt: skip
