"""Which processes of a run generate and which learn (spec.trainer.placement, issue 31 item 4).

- colocated (the default): every process plays its share of a step's episodes with its own
  embedded engine, then all of them learn it as one FSDP2 job (distributed.py).
- disaggregated: the last `generating` processes only generate, the others only learn. Why:
  on one GPU the two phases take turns (or, with rollout.maxStaleness 1 on one GPU, slow each
  other down: docs/benchmarks.md); on separate GPUs the generators play step k+1 while the
  learners train step k, the shape AReaL and DART use. After each update learner 0 broadcasts the
  new weights to the generators with their version (weight_broadcast.py), so rollout.maxStaleness
  and truncated importance sampling keep their meaning. Rank 0 always learns: it writes the
  checkpoints, the report and the status, as in the colocated placement.

The default count of generating processes splits the GPUs in proportion to the time each phase
took on one GPU: the loop measured on an H200 on 2026-11-27 (docs/benchmarks.md, `make
bench-loop`, the chosen learner settings) spent 28% of its time generating and 44% learning.
Choosing g generators of w minimises max(28 / g, 44 / (w - g)), the slower side of the pipeline:
1 of 2, 2 of 4, 3 of 8. That figure says nothing yet about separate GPUs, where each side runs
alone; the user's spec.trainer.generatingProcesses wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kubecua_trainer.config import TrainingRunSpec

# Shares of one GPU's loop time (H200, 2026-11-27, docs/benchmarks.md's issue-31 section).
GENERATING_SHARE, LEARNING_SHARE = 0.28, 0.44

Role = Literal["both", "generator", "learner"]


@dataclass(frozen=True)
class Placement:
    """world processes, of which the last `generating` only generate (0: colocated)."""

    world: int = 1
    generating: int = 0

    @property
    def disaggregated(self) -> bool:
        return self.generating > 0

    @property
    def learners(self) -> list[int]:
        return list(range(self.world - self.generating))

    @property
    def generators(self) -> list[int]:
        return list(range(self.world - self.generating, self.world))

    def role(self, rank: int) -> Role:
        if not self.disaggregated:
            return "both"
        return "generator" if rank in self.generators else "learner"

    def learns(self, rank: int) -> bool:
        return self.role(rank) != "generator"

    def generates(self, rank: int) -> bool:
        return self.role(rank) != "learner"

    def share(self, rank: int) -> tuple[int, int] | None:
        """(index, count): this process plays the episodes whose number is index modulo count
        (distributed.episode_owner); None: it plays none."""
        if not self.disaggregated:
            return rank, self.world
        if rank not in self.generators:
            return None
        return rank - self.generators[0], self.generating


def default_generating(world: int) -> int:
    """Generating processes of `world` when the spec leaves it out (module docstring): the
    smallest g that minimises the slower side, max(GENERATING_SHARE / g, LEARNING_SHARE /
    (world - g)). Example: 2 -> 1, 4 -> 2, 8 -> 3."""
    if world < 2:
        raise ValueError(f"a disaggregated placement needs 2 or more processes, not {world}")
    return min(
        range(1, world),
        key=lambda g: (max(GENERATING_SHARE / g, LEARNING_SHARE / (world - g)), g),
    )


def placement_of(spec: TrainingRunSpec, world: int) -> Placement:
    """The spec's placement on `world` processes; ConfigError naming the field where it cannot
    run (the API server's CEL rules refuse the same in a cluster; a local manifest comes here)."""
    from kubecua_trainer.config import ConfigError  # pydantic: not needed by the GPU benches

    t = spec.trainer
    if t.placement == "colocated":
        return Placement(world, 0)
    field = "spec.trainer.placement: disaggregated"
    if world < 2:
        raise ConfigError(f"{field} needs at least 2 processes, launched as {world}")
    if spec.rollout.engine != "hf":
        raise ConfigError(f"{field} generates with the embedded engine: set rollout.engine hf")
    if spec.evaluation is not None or spec.warmup is not None:
        raise ConfigError(
            f"{field} runs no warm-up or held-out evaluation yet: remove spec.warmup and "
            "spec.evaluation, or use placement colocated"
        )
    generating = t.generating_processes or default_generating(world)
    if generating >= world:
        raise ConfigError(
            f"spec.trainer.generatingProcesses: {generating} of {world} processes would "
            "generate; at least one must learn"
        )
    episodes = spec.algorithm.tasks_per_step * spec.algorithm.group_size
    if generating > episodes:
        raise ConfigError(
            f"spec.trainer.generatingProcesses: {generating} generating processes but a step "
            f"has only {episodes} episodes (algorithm.tasksPerStep x groupSize)"
        )
    return Placement(world, generating)
