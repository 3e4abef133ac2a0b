"""Where a run writes, and its checkpoints: saving, resuming, retention (checkpoint.keep) and
the weights directory a disk-loading engine reads every step."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from kubecua_trainer.config import TrainingRunSpec
from kubecua_trainer.learning.checkpoint import (
    checkpoint_time,
    latest_checkpoint,
    load_checkpoint,
    load_sharded_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    save_sharded_checkpoint,
    save_sharded_weights,
    save_weights,
)
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.model import Policy
from kubecua_trainer.parallel.distributed import Dist
from kubecua_trainer.rollout.curriculum import Curriculum
from kubecua_trainer.telemetry.metrics import TrainerMetrics

log = logging.getLogger(__name__)


def run_dirs(spec: TrainingRunSpec) -> tuple[Path, Path]:
    """(output dir, checkpoint root): local runs keep both under outputDir."""
    if spec.output_dir:
        return Path(spec.output_dir), Path(spec.output_dir) / "checkpoints"
    return Path(spec.checkpoint.path) / "run", Path(spec.checkpoint.path)


@dataclass
class Saver:
    """Writes checkpoints of one run and remembers the newest: step, path. Distributed, every
    rank calls save() and resume() (they gather and broadcast) and rank 0 alone touches disk.
    It holds what a checkpoint contains (policy, learner, replay, curriculum) and the metrics its
    checkpoint gauge goes to only to save and restore them: the run's context (loop.Loop) owns
    them, and the run's code reads them there."""

    root: Path
    spec: TrainingRunSpec
    policy: Policy
    learner: Learner
    replay: SuccessReplay
    metrics: TrainerMetrics
    dist: Dist = field(default_factory=Dist)
    step: int = 0
    path: str | None = None
    # spec.tasks.curriculum's pass rates: checkpointed in trainer_state.json's extra
    curriculum: Curriculum | None = None
    # False on a generating process of the disaggregated placement (placement.py): it holds no
    # learner state, so it reads and writes no checkpoint and only follows the step
    writes: bool = True

    def resume(self) -> int:
        """Load the newest checkpoint under root if any; returns the first step to run."""
        if not self.writes:
            return self.step + 1
        latest = self.dist.broadcast(
            latest_checkpoint(str(self.root)) if self.dist.is_main else None
        )
        if latest is not None:
            if self.dist.enabled:
                state = load_sharded_checkpoint(
                    latest, self.policy, self.learner, self.replay, self.dist
                )
            else:
                state = load_checkpoint(latest, self.policy, self.learner, self.replay)
            self.step, self.path = int(state["step"]), latest
            saved = state["extra"].get("curriculum")
            if self.curriculum is not None and saved is not None:
                self.curriculum.load_state_dict(saved)
            self.policy.version = self.step  # the learner's weights now include that step
            self._observe_checkpoint(latest)
        return self.step + 1

    def _observe_checkpoint(self, path: str) -> None:
        """Every pod's metrics show the checkpoint's time (rank 0's volume has the file)."""
        stamp = self.dist.broadcast(checkpoint_time(path) if self.dist.is_main else None)
        if self.dist.serves_metrics and stamp is not None:
            self.metrics.checkpoint_written(stamp)

    def save(self, step: int) -> str:
        if not self.writes:
            raise RuntimeError("a generating process writes no checkpoint: call save_or_follow")
        extra = {"curriculum": self.curriculum.state_dict()} if self.curriculum else {}
        if self.dist.enabled:
            path = save_sharded_checkpoint(
                self.root, step, self.policy, self.learner, self.replay, self.dist, extra
            )
        else:
            path = save_checkpoint(
                str(self.root), step, self.policy, self.learner, self.replay, extra=extra
            )
        self._observe_checkpoint(path)
        if self.dist.is_main:
            log.info("checkpoint of step %d written by rank %d: %s", step, self.dist.rank, path)
            prune_checkpoints(str(self.root), keep=self.spec.checkpoint.keep)
        self.step, self.path = step, path
        return path

    def save_or_follow(self, step: int) -> str | None:
        """save(step) where this process writes checkpoints; elsewhere only note the step."""
        if self.writes:
            return self.save(step)
        self.step = step
        return None

    def weights_for_engine(self, step: int, saved: str | None) -> str:
        """A directory with this step's weights for servers that load from disk: the checkpoint
        when one was written, else a weights-only copy under <root>/weights (last two kept)."""
        if saved is not None:
            return saved
        if self.dist.enabled:
            return save_sharded_weights(self.root / "weights", step, self.policy, self.dist)
        return save_weights(self.root / "weights", step, self.policy)
