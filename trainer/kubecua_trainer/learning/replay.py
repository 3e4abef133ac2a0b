"""Success replay: real successful episodes per task, injected into all-fail groups.

Sparse rewards make many groups all-fail, which carry no GRPO signal. Replacing one member of such
a group with a stored success of the same task gives the group variance (Slime-OSWorld's idea; its
buffer never grew because update() was never called: here every online success is added). The
replayed sample keeps its original behaviour log-probs, so the learner's truncated importance
weight accounts for it being off-policy.
"""

from __future__ import annotations

import copy
import random
from collections import deque
from dataclasses import asdict, replace
from typing import Any

from kubecua_trainer.tokens import Sample


class SuccessReplay:
    """Keeps the last `max_per_task` successful episodes (each a list of samples) per task."""

    def __init__(self, max_per_task: int = 4, seed: int = 0):
        if max_per_task < 1:
            raise ValueError(f"max_per_task must be >= 1, got {max_per_task}")
        self.max_per_task = max_per_task
        self._store: dict[str, deque[list[Sample]]] = {}
        self._rng = random.Random(seed)
        self.injections = 0

    def __len__(self) -> int:
        return sum(len(d) for d in self._store.values())

    def add(self, task_id: str, samples: list[Sample]) -> None:
        """Store one successful episode's samples; the oldest of the task is dropped when full."""
        if not samples:
            return
        kept = deque(self._store.get(task_id, ()), maxlen=self.max_per_task)
        kept.append([copy.deepcopy(s) for s in samples])
        self._store[task_id] = kept

    def stored(self) -> list[Sample]:
        """Every stored sample (the buffer's own objects)."""
        return [s for eps in self._store.values() for ep in eps for s in ep]

    def sample(self, task_id: str) -> list[Sample] | None:
        """A copy of one stored success of task_id (chosen at random), or None."""
        episodes = self._store.get(task_id)
        if not episodes:
            return None
        self.injections += 1
        return [copy.deepcopy(s) for s in self._rng.choice(list(episodes))]

    def inject(self, group: list[Sample], task_id: str) -> bool:
        """Trajectory mode: if every reward in group is <= 0, replace its last sample with a
        stored success (same group_id). Returns whether it injected.

        Example: rewards [0, 0, 0, 0] and a stored success -> [0, 0, 0, 1]; [0, 1, 0, 0] -> no-op.
        """
        if not group or any(s.reward > 0 for s in group):
            return False
        replayed = self.sample(task_id)
        if replayed is None:
            return False
        group[-1] = replace(replayed[-1], group_id=group[-1].group_id, advantage=0.0)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {
            "max_per_task": self.max_per_task,
            "store": {t: [[asdict(s) for s in ep] for ep in eps] for t, eps in self._store.items()},
            "rng": self._rng.getstate(),
            "injections": self.injections,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.max_per_task = int(d["max_per_task"])
        self._store = {
            t: deque([[Sample(**s) for s in ep] for ep in eps], maxlen=self.max_per_task)
            for t, eps in d["store"].items()
        }
        self._rng.setstate(d["rng"])
        self.injections = int(d["injections"])
