"""Paired comparisons of held-out evaluations: each held-out instance (and seed) is one pair of
outcomes, before and after, read from two evaluations' summary.json; McNemar's exact test on
the discordant pairs says whether the change is outside the noise."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path
from typing import Any


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b pairs went fail -> success, c success -> fail; under
    no change each discordant pair is a fair coin.

    >>> mcnemar_exact(0, 0), mcnemar_exact(5, 5)
    (1.0, 1.0)
    >>> round(mcnemar_exact(10, 0), 5), round(mcnemar_exact(12, 2), 4)
    (0.00195, 0.0129)
    """
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def outcomes(out_dir: Path, step: int) -> dict[str, bool]:
    """Task id -> succeeded, for one evaluation of a run (tasks with no scored episode left
    out: an infrastructure failure is not an outcome)."""
    path = out_dir / "evaluations" / f"step-{step:04d}" / "summary.json"
    rows = json.loads(path.read_text())["tasks"]
    return {r["task_id"]: r["successes"] > 0 for r in rows if r["scored"]}


def compare(pairs: list[tuple[dict[str, bool], dict[str, bool]]]) -> dict[str, Any]:
    """Pool (before, after) evaluations of the same instances (one per seed) into one test."""
    b = c = n = 0
    for before, after in pairs:
        for tid in before.keys() & after.keys():
            n += 1
            b += not before[tid] and after[tid]
            c += before[tid] and not after[tid]
    return {"pairs": n, "fail_to_success": b, "success_to_fail": c, "p": mcnemar_exact(b, c)}
