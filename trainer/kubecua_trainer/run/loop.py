"""What a run's steps share: how this process runs the spec (RunOptions), what the run returns
(RunResult) and the run's context that the loop and its stages (pipeline.py) read (Loop)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubecua_trainer.config import TrainingRun, TrainingRunSpec
    from kubecua_trainer.evaluation.held_out import HeldOut
    from kubecua_trainer.learning.learner import Learner
    from kubecua_trainer.learning.replay import SuccessReplay
    from kubecua_trainer.model import Policy
    from kubecua_trainer.parallel.distributed import Dist
    from kubecua_trainer.placement.disaggregated import Roles
    from kubecua_trainer.report import RunReport
    from kubecua_trainer.rollout.curriculum import Curriculum
    from kubecua_trainer.rollout.episode import Rollout
    from kubecua_trainer.run.saver import Saver
    from kubecua_trainer.run.stopping import Stop
    from kubecua_trainer.sources import SandboxSource
    from kubecua_trainer.telemetry.cost import CostLedger
    from kubecua_trainer.telemetry.metrics import TrainerMetrics
    from kubecua_trainer.telemetry.progress import RunProgress
    from kubecua_trainer.telemetry.status import StatusPatcher
    from kubecua_trainer.weights.weight_sync import WeightSync


@dataclass
class RunOptions:
    """How this process runs the spec (not part of the spec)."""

    console: bool = True
    metrics_addr: str = "127.0.0.1"
    patch_status: bool = False  # cluster mode: patch the TrainingRun's status subresource
    sandbox_wait_seconds: float = 600.0
    source: SandboxSource | None = None  # tests hand in a source that is already running
    on_step: Any = None  # callback(step, stats), e.g. for tests to inject failures
    handle_signals: bool = False  # SIGTERM -> Stop (the CLI; a pod being suspended or evicted)
    signals_seen: list[int] | None = None  # SIGTERMs the CLI caught before the run listened
    stop: Stop | None = None  # tests hand one in to stop the run from outside
    on_built: Any = (
        None  # callback(engine, learner) once built (bench/loop_bench.py reads counters)
    )
    # False: write no checkpoint (bench/loop_bench.py: a 3B run's optimizer state is ~50 GB)
    checkpoints: bool = True
    # False: generation and learning overlapping on one GPU launch on the default stream with no
    # chunk rule, as before gpu_share.py (bench/loop_bench.py's unshared comparison)
    share_gpu: bool = True
    # Release the episodes an earlier attempt of this run left busy (sources/reclaim.py). The
    # evaluate command does not: two evaluations of one model (one run name) may share a pool.
    reclaim: bool = True


@dataclass
class RunResult:
    out_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    last_checkpoint: str | None = None
    stopped_at: int | None = None  # a stop ended the run; its last completed step (0: none)
    main: bool = True  # False on the ranks > 0 of a distributed run (no report, no history)

    @property
    def report(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def curves(self) -> Path:
        return self.out_dir / "curves.png"


@dataclass
class Loop:
    """The run's context: what its steps and stages share, built once by train._train.

    It owns what the run trains and measures (policy, learner, replay, curriculum, metrics); the
    saver writes and restores the first four in checkpoints and is read for nothing else."""

    run: TrainingRun
    ro: Rollout
    tasks: list[dict]
    policy: Policy  # the learner's (generation may run on a copy: ro.policy)
    learner: Learner
    replay: SuccessReplay
    metrics: TrainerMetrics
    saver: Saver
    report: RunReport
    patcher: StatusPatcher | None
    progress: RunProgress
    stop: Stop
    opts: RunOptions
    result: RunResult
    dist: Dist
    sync: WeightSync  # how the engine gets each step's weights
    held_out: HeldOut | None = None  # spec.evaluation's tasks, loaded once
    curriculum: Curriculum | None = None  # spec.tasks.curriculum's pass rates
    cost: CostLedger | None = None  # what the run spent (cost.py); built by train._train
    roles: Roles | None = None  # who generates and who learns (placement.py); None: all do

    @property
    def spec(self) -> TrainingRunSpec:
        return self.run.spec
