"""The report's warm-up section (templates/_warmup.html.j2) and the run's seed, from warmup.json
(warmup/stage.py) and the evaluations' summaries: how long the warm-up ran, its last loss, and
whether it reached spec.warmup.goal (warmup/goal.py), said loudly when it did not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def warmup_view(out_dir: Path) -> dict[str, Any] | None:
    """None for a run without a warm-up (or before its end)."""
    try:
        summary = json.loads((out_dir / "warmup.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    losses = summary.get("epoch_losses") or []
    return {
        "epochs": summary.get("epochs"),
        "demonstrations": summary.get("demonstrations"),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "seconds": summary.get("seconds"),
        "stopped_by": summary.get("stopped_by"),
        "goal": summary.get("goal"),  # absent in a warmup.json written before goals existed
    }


def run_seed(out_dir: Path, evaluations: list[dict[str, Any]]) -> int | None:
    """spec.seed as the run wrote it: warmup.json's, else its evaluations' (None: neither)."""
    try:
        seed = json.loads((out_dir / "warmup.json").read_text()).get("seed")
    except (OSError, json.JSONDecodeError):
        seed = None
    if seed is None and evaluations:
        seed = evaluations[0].get("seed")
    return int(seed) if isinstance(seed, int) else None
