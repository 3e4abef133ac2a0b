"""The report's cost section (templates/_cost.html.j2): the run's figures from its ledger
(telemetry/cost.py writes cost.json) and each step's own from the history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubecua_trainer.telemetry.cost import read_ledger


def cost_view(out_dir: Path, history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """None before the run spent anything on record; steps newest first, as the step table."""
    run = read_ledger(out_dir)
    if run is None:
        return None
    steps = [row for row in reversed(history) if "gpu_seconds" in row]
    return {"run": run, "steps": steps}
