"""The figures of one evaluation: success rate, mean score and pass@k, per task and overall.

Only scored episodes count. An infrastructure failure (records.EXCLUDED) is left out of every
rate and counted by reason: a desktop that failed to start says nothing about the policy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from math import comb
from typing import Any

from kubecua_trainer.rollout.records import EpisodeResult


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k estimator (Chen et al. 2021): the chance that at least one of k
    episodes drawn without replacement from n scored ones, c of them successes, succeeds:
    1 - C(n-c, k) / C(n, k). None when fewer than k episodes were scored.

    Example: n = 4, c = 1: pass@1 = 1 - C(3,1)/C(4,1) = 1 - 3/4 = 0.25;
    pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; pass@4 = 1 - C(3,4)/C(4,4) = 1 - 0/1 = 1.0.
    """
    if k < 1 or n < k:
        return None
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass
class TaskFigures:
    task_id: str
    domain: str
    episodes: list[EpisodeResult] = field(default_factory=list)

    @property
    def scored(self) -> list[EpisodeResult]:
        return [e for e in self.episodes if not e.excluded]

    @property
    def successes(self) -> int:
        return sum(e.outcome == "success" for e in self.scored)

    def summary(self, ks: list[int]) -> dict[str, Any]:
        scored = self.scored
        n, c = len(scored), self.successes
        return {
            "task_id": self.task_id,
            "domain": self.domain,
            "scored": n,
            "excluded": len(self.episodes) - n,
            "successes": c,
            "success_rate": c / n if n else None,
            "mean_score": _mean([float(e.reward or 0.0) for e in scored]),
            "pass_at_k": {str(k): pass_at_k(n, c, k) for k in ks},
            "episodes": [e.key for e in self.episodes],
        }


def summarize(tasks: list[TaskFigures], episodes_per_task: int) -> dict[str, Any]:
    """The overall figures (contracts: summary.json without its run fields).

    success_rate and mean_score pool every scored episode; pass@k is the mean over the tasks
    that have at least k scored episodes (a task whose desktops failed cannot be judged).
    Example: task a scored [1, 0, 0, 0], task b scored [1, 1, 0, 0], k = 1 and 4: success_rate
    3/8 = 0.375; pass@1 = (0.25 + 0.5) / 2 = 0.375; pass@4 = (1.0 + 1.0) / 2 = 1.0.
    """
    ks = sorted({1, episodes_per_task})
    rows = [t.summary(ks) for t in tasks]
    scored = [e for t in tasks for e in t.scored]
    excluded = Counter(e.outcome for t in tasks for e in t.episodes if e.excluded)
    pass_k: dict[str, float | None] = {}
    for k in ks:
        values = [r["pass_at_k"][str(k)] for r in rows if r["pass_at_k"][str(k)] is not None]
        pass_k[str(k)] = _mean(values)
    successes = sum(e.outcome == "success" for e in scored)
    return {
        "success_rate": successes / len(scored) if scored else None,
        "mean_score": _mean([float(e.reward or 0.0) for e in scored]),
        "scored": len(scored),
        "excluded": sum(excluded.values()),
        "excluded_by_reason": dict(sorted(excluded.items())),
        "pass_at_k": pass_k,
        "tasks": rows,
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
