"""What a run costs: sandbox-seconds leased and GPU-seconds held, per step and for the whole run,
per trajectory and per successful trajectory; money only where spec.cost sets both prices.

- A step's figures: its episodes' lease time (records.EpisodeResult.sandbox_seconds: from the
  lease to the verified reset) and its own wall time (rollout + learning) times the GPUs the
  run holds.
- The run's figures count everything the run paid for: every lease of the pool's sandboxes
  (training and evaluation episodes, and episodes a stop abandoned; SandboxLeases.held_seconds)
  and the trainer process's whole wall time times its GPUs (start-up, warm-up, evaluation
  included). They live in the ledger `cost.json` beside the report, which a resumed run reads
  and adds to: a checkpoint rolls the model back, never what was spent.
- A trajectory is a training episode, whatever its outcome (an excluded one cost as much).
- GPUs held: trainer.nodes x trainer.gpusPerNode, plus rollout.replicas x gpusPerReplica for
  the sglang servers the operator runs (not for sglangUrls: someone else's servers). The
  engine's pods live as long as the run, so the trainer's wall time stands for theirs too.
Leaves out: the ranks > 0 of a distributed run count their leases at each step's end, so what
one of them abandons at a stop is not counted; a SIGKILLed trainer loses what it did since its
last step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubecua_api.cost import CostConfig
from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_trainer.telemetry.status import build_cost_status

if TYPE_CHECKING:
    from kubecua_trainer.telemetry.metrics import TrainerMetrics
    from kubecua_trainer.telemetry.status import StatusPatcher

LEDGER = "cost.json"
HOUR = 3600.0
# A step's statistics carry these already (step.py): its figures leave them out.
STEP_KEYS_KNOWN = ("trajectories", "successful_trajectories", "sandbox_seconds")


@dataclass
class Spent:
    sandbox_seconds: float = 0.0
    gpu_seconds: float = 0.0
    trajectories: int = 0
    successes: int = 0


def gpus_held(spec: TrainingRunSpec) -> int:
    """GPUs the run holds while it runs: e.g. 2 nodes x 4 GPUs and 2 operator-run sglang servers
    of 1 GPU each: 10; a CPU run with the embedded engine: 0."""
    gpus = spec.trainer.nodes * spec.trainer.gpus_per_node
    ro = spec.rollout
    if ro.engine == "sglang" and not ro.sglang_urls:
        gpus += ro.replicas * ro.gpus_per_replica
    return gpus


def _per(value: float, count: int) -> float | None:
    return value / count if count else None


def figures(spent: Spent, prices: CostConfig | None) -> dict[str, Any]:
    """The cost figures of `spent`, per trajectory and per success (None where undefined).

    Example: 600 sandbox-seconds and 1,800 GPU-seconds for 20 trajectories, 4 successful, at
    0.25 per sandbox-hour and 2.00 per GPU-hour: 30 sandbox-s and 90 GPU-s per trajectory, 150
    and 450 per success; money 600/3600 x 0.25 + 1800/3600 x 2.00 = 1.0417, 0.0521 per
    trajectory, 0.2604 per success.
    """
    n, wins = spent.trajectories, spent.successes
    out: dict[str, Any] = {
        "sandbox_seconds": spent.sandbox_seconds,
        "gpu_seconds": spent.gpu_seconds,
        "trajectories": n,
        "successful_trajectories": wins,
        "sandbox_seconds_per_trajectory": _per(spent.sandbox_seconds, n),
        "gpu_seconds_per_trajectory": _per(spent.gpu_seconds, n),
        "sandbox_seconds_per_success": _per(spent.sandbox_seconds, wins),
        "gpu_seconds_per_success": _per(spent.gpu_seconds, wins),
    }
    sandbox_price = prices.price_per_sandbox_hour if prices else None
    gpu_price = prices.price_per_gpu_hour if prices else None
    if prices is not None and sandbox_price is not None and gpu_price is not None:
        money = spent.sandbox_seconds / HOUR * sandbox_price + spent.gpu_seconds / HOUR * gpu_price
        out |= {"currency": prices.currency, "cost": money, "cost_per_trajectory": _per(money, n),
                "cost_per_success": _per(money, wins)}  # fmt: skip
    return out


class CostLedger:
    """The run's running totals: earlier processes' (from the ledger file) plus this one's."""

    def __init__(
        self, out_dir: Path, spec: TrainingRunSpec, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = Path(out_dir) / LEDGER
        self.gpus = gpus_held(spec)
        self.prices = spec.cost if spec.cost.priced else None
        self._clock = clock
        self.started = clock()
        self.earlier = read_spent(self.path)
        self.leased = 0.0  # this process's lease seconds, all ranks', as of the last step
        self.own = 0.0  # this rank's share of them
        self.trajectories = 0
        self.successes = 0

    def step(self, outcomes: Iterable[str], sandbox_seconds: float, seconds: float,
             leased: float, own: float) -> dict[str, Any]:  # fmt: skip
        """Count a step's episodes (their outcomes), and return its own figures. leased: this
        process's lease seconds so far, summed over the ranks; own: this rank's alone (both
        SandboxLeases.held_seconds; equal in a single process)."""
        outcomes = list(outcomes)
        wins = sum(o == "success" for o in outcomes)
        self.trajectories += len(outcomes)
        self.successes += wins
        self.leased, self.own = leased, own
        step = figures(
            Spent(sandbox_seconds, self.gpus * seconds, len(outcomes), wins), self.prices
        )
        return {k: v for k, v in step.items() if k not in STEP_KEYS_KNOWN}

    def spent(self, own: float | None = None) -> Spent:
        """The whole run so far. own: this rank's lease seconds now, newer than the last step's
        (the leases since: evaluation, or episodes a stop abandoned)."""
        leased = self.leased + (own - self.own if own is not None else 0.0)
        e = self.earlier
        return Spent(
            sandbox_seconds=e.sandbox_seconds + leased,
            gpu_seconds=e.gpu_seconds + self.gpus * (self._clock() - self.started),
            trajectories=e.trajectories + self.trajectories,
            successes=e.successes + self.successes,
        )

    def save(self, own: float | None = None) -> dict[str, Any]:
        """Write the ledger (rank 0): the whole run's figures at today's prices, which the
        report shows and a resumed run adds to; a reader never sees half a file."""
        totals = figures(self.spent(own), self.prices)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(totals))
        tmp.replace(self.path)
        return totals


def read_spent(path: Path) -> Spent:
    """What an earlier process of the run spent (its ledger), or nothing."""
    if not path.exists():
        return Spent()
    f = json.loads(path.read_text())
    return Spent(f["sandbox_seconds"], f["gpu_seconds"], f["trajectories"],
                 f["successful_trajectories"])  # fmt: skip


def read_ledger(out_dir: Path) -> dict[str, Any] | None:
    """The run's cost figures as its ledger holds them (the report reads it); None before."""
    path = Path(out_dir) / LEDGER
    return dict(json.loads(path.read_text())) if path.exists() else None


def publish(
    ledger: CostLedger, own: float, metrics: TrainerMetrics, patcher: StatusPatcher | None
) -> dict[str, Any]:
    """Rank 0, after each step and once at the end: write the ledger, set the run's cost
    gauges, patch status.cost. own: this rank's SandboxLeases.held_seconds now."""
    totals = ledger.save(own)
    metrics.observe_cost(totals)
    if patcher is not None:
        patcher.patch({"cost": build_cost_status(totals)})
    return totals
