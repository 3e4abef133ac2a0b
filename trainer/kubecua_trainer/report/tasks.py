"""The report's tasks section (templates/_tasks.html.j2): what spec.tasks.verified left out
of training (verified-tasks.json, rollout/verified.py) and how many GRPO groups started from
different screens (each step's mixed_start_groups in history.jsonl, batch.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubecua_trainer.rollout.verified import REPORT_FILE


def tasks_view(out_dir: Path, history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """None when there is nothing to say: no manifest and no step with a history yet."""
    path = Path(out_dir) / REPORT_FILE
    verified = json.loads(path.read_text()) if path.is_file() else None
    steps = [r for r in history if "mixed_start_groups" in r]
    if verified is None and not steps:
        return None
    mixed = [int(r["step"]) for r in steps if r["mixed_start_groups"]]
    return {
        "verified": verified,
        "mixed_start_groups": int(sum(r["mixed_start_groups"] for r in steps)),
        "mixed_steps": mixed,
        "steps": len(steps),
    }
