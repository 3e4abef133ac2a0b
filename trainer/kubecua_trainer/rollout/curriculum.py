"""A curriculum by pass rate (spec.tasks.curriculum): draw the tasks a group can learn from.

GRPO learns nothing from a group whose episodes all succeed or all fail (equal rewards, zero
advantage; batch.py drops it). The curriculum keeps each training task's pass rate over its last
`window` scored episodes (infrastructure failures do not count, as they are never rewards) and
draws a step's tasks with weight 1 for a task whose rate lies in [band.low, band.high] or that
was not played yet, and weight `floor` for the others, so a task solved always or never lately
is still drawn, floor times as often, and may come back into the band.

Exact resume: a step's tasks are a function of the seed, the step and the pass rates of the
steps up to step - 1 - lag, where lag is rollout.maxStaleness (a step that plays ahead is drawn
before the steps it overtakes have learned). The results of the steps after that are kept aside
until a draw needs them, and all of it (state_dict) goes into the checkpoint, so a resumed run
draws what the uninterrupted one drew. Every rank sees every group (step.learn), so every rank
keeps the same curriculum.

Drawing: weighted sampling without replacement (Efraimidis-Spirakis: the largest u^(1/w) of a
uniform u per task), so a step has distinct tasks; a step with more tasks than the set repeats
the draw for the rest.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from kubecua_api.curriculum import CurriculumConfig

# Classes of a pass rate, for status, metrics and the report (bounded: a metric label).
CLASSES = ("unplayed", "never", "below_band", "in_band", "above_band", "always")


class Curriculum:
    def __init__(self, cfg: CurriculumConfig, task_ids: Iterable[str], lag: int = 0):
        self.cfg = cfg
        self.lag = lag
        # per task, its last `window` scored outcomes, oldest first (1 solved, 0 not)
        self.outcomes: dict[str, list[int]] = {str(t): [] for t in task_ids}
        self.pending: dict[int, dict[str, list[int]]] = {}  # step -> outcomes, not yet applied
        self.applied = 0  # the last step whose outcomes are in self.outcomes

    def pass_rate(self, task_id: str) -> float | None:
        seen = self.outcomes.get(task_id) or []
        return sum(seen) / len(seen) if seen else None

    def weight(self, task_id: str) -> float:
        rate = self.pass_rate(task_id)
        if rate is None or self.cfg.band.low <= rate <= self.cfg.band.high:
            return 1.0
        return self.cfg.floor

    def observe(self, step: int, results: dict[str, list[bool]]) -> None:
        """Step `step`'s scored outcomes per task (every episode of its groups that reached a
        score); applied once a draw needs them."""
        if step > self.applied:
            self.pending[step] = {t: [int(r) for r in rs] for t, rs in results.items()}

    def _catch_up(self, upto: int) -> None:
        for step in sorted(s for s in self.pending if s <= upto):
            for task, results in self.pending.pop(step).items():
                if task in self.outcomes:
                    self.outcomes[task] = (self.outcomes[task] + results)[-self.cfg.window :]
            self.applied = max(self.applied, step)

    def draw(self, tasks: list[dict[str, Any]], step: int, per_step: int, seed: int) -> list[dict]:
        """The tasks of step `step` (1-based), deterministic in (seed, step, the rates of the
        steps up to step - 1 - lag)."""
        self._catch_up(step - 1 - self.lag)
        rng = random.Random(seed * 1_000_003 + step)
        ids = [str(t.get("id", i)) for i, t in enumerate(tasks)]
        weights = [self.weight(i) for i in ids]
        picked: list[dict] = []
        while len(picked) < per_step:
            keys = [rng.random() ** (1.0 / w) for w in weights]
            order = sorted(range(len(tasks)), key=lambda i: keys[i], reverse=True)
            picked += [tasks[i] for i in order[: per_step - len(picked)]]
        return picked

    def summary(self) -> dict[str, Any]:
        """How many tasks fall in each class, the pass rates' histogram (ten bins of 0.1, the
        last one closed) and their mean over played tasks."""
        counts = dict.fromkeys(CLASSES, 0)
        bins = [0] * 10
        rates = []
        low, high = self.cfg.band.low, self.cfg.band.high
        for task in self.outcomes:
            rate = self.pass_rate(task)
            if rate is None:
                counts["unplayed"] += 1
                continue
            rates.append(rate)
            bins[min(int(rate * 10), 9)] += 1
            if rate == 0.0:
                counts["never"] += 1
            elif rate == 1.0:
                counts["always"] += 1
            elif rate < low:
                counts["below_band"] += 1
            elif rate > high:
                counts["above_band"] += 1
            else:
                counts["in_band"] += 1
        mean = sum(rates) / len(rates) if rates else None
        return {"tasks": len(self.outcomes), "classes": counts, "histogram": bins,
                "mean_pass_rate": mean}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """JSON-able: it goes into the checkpoint's trainer_state.json."""
        return {
            "outcomes": self.outcomes,
            "pending": {str(s): r for s, r in self.pending.items()},
            "applied": self.applied,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for task, results in state["outcomes"].items():
            if task in self.outcomes:  # a task no longer in the set is forgotten
                self.outcomes[task] = [int(r) for r in results][-self.cfg.window :]
        self.pending = {int(s): r for s, r in state["pending"].items()}
        self.applied = int(state["applied"])


def build_curriculum(spec: Any, tasks: list[dict[str, Any]]) -> Curriculum | None:
    """The run's curriculum (spec.tasks.curriculum) over its training tasks, or None."""
    if spec.tasks.curriculum is None:
        return None
    ids = [str(t.get("id", i)) for i, t in enumerate(tasks)]
    return Curriculum(spec.tasks.curriculum, ids, lag=spec.rollout.max_staleness)


def scored_results(groups: Iterable[Any]) -> dict[str, list[bool]]:
    """A step's groups (rollout.groups.Group) -> each task's scored outcomes (True: solved)."""
    out: dict[str, list[bool]] = {}
    for g in groups:
        out.setdefault(g.task_id, []).extend(e.outcome == "success" for e in g.scored)
    return out
