"""A run's held-out tasks (spec.evaluation.tasks): loaded once at the start, and never trained on.

Its own module, below the run's context (loop.Loop holds one) and the evaluation stage (stage.py,
which reads it through the Loop), so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubecua_trainer.config import ConfigError, TrainingRunSpec
from kubecua_trainer.rollout.tasks import load_tasks


@dataclass(frozen=True)
class HeldOut:
    """spec.evaluation.tasks, loaded once when the run starts (a ConfigMap that is briefly
    unreadable later on must not fail a run between two evaluations)."""

    tasks: list[dict]
    domains: dict[str, str]  # task id -> OSWorld domain

    @property
    def ids(self) -> set[str]:
        return set(self.domains)


def load_held_out(
    spec: TrainingRunSpec, namespace: str | None, trained: list[dict]
) -> HeldOut | None:
    """The run's held-out tasks, or None without spec.evaluation; ConfigError when one of them
    is also among the training tasks `trained`."""
    cfg = spec.evaluation
    if cfg is None:
        return None
    domains: dict[str, str] = {}
    tasks = load_tasks(cfg.tasks, namespace, field="spec.evaluation.tasks", domains=domains)
    overlap = sorted({str(t["id"]) for t in trained} & set(domains))
    if overlap and spec.steps > 0:  # an evaluate-only run trains on nothing
        raise ConfigError(
            f"spec.evaluation.tasks: held-out tasks are never trained on, but {overlap} "
            "are also in spec.tasks: remove them from one of the two"
        )
    return HeldOut(tasks, domains)
