"""One TrainingRun over several processes (torchrun): who does what, and the collectives.

Under torchrun (WORLD_SIZE > 1) every rank plays its share of a step's episodes, all ranks then
hold the whole step without its images (exchange.py: pixels go only where they are trained),
build the same batch, and train it as one FSDP2 job (sharded.py). Rank 0 alone writes
checkpoints, patches the status, writes the report; the first process of each pod (LOCAL_RANK 0)
serves that pod's metrics endpoint. A single process (no WORLD_SIZE, or 1) is the `Dist()`
default: every helper here is then a no-op.

Collectives are only ever issued from the training loop, in the same order on every rank
(exchange the rollout, learn, refresh weights, checkpoint), never from rollout tasks that may run
concurrently with learning, so they cannot interleave differently on different ranks.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from kubecua_trainer.config import TrainingRunSpec

T = TypeVar("T")


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    joined: bool = False  # in a process group (a world of one only when a bench asks for it)
    # A subgroup of the world (placement disaggregated: the learning processes, ranks 0..world-1
    # of the job, so a group rank is also the job's rank); None: the whole job.
    group: Any = None

    @property
    def enabled(self) -> bool:
        return self.joined

    @property
    def is_main(self) -> bool:
        """Rank 0: the checkpoint writer, status patcher and report writer."""
        return self.rank == 0

    @property
    def serves_metrics(self) -> bool:
        """One metrics endpoint per pod: its first process."""
        return self.local_rank == 0

    def device(self) -> torch.device:
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def all_gather(self, obj: T) -> list[T]:
        """Every rank's obj, in rank order (pickled; CPU tensors inside are fine)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj: T) -> T:
        """Rank 0's obj on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather_to_main(self, obj: T) -> list[T] | None:
        """Every rank's obj on rank 0 (None elsewhere)."""
        if not self.enabled:
            return [obj]
        out: list[Any] | None = [None] * self.world if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def scatter_from_main(self, objs: list[T] | None) -> T:
        """objs[r] (given on rank 0) on rank r."""
        return self.scatter_from(objs, 0)

    def scatter_from(self, objs: list[T] | None, src: int) -> T:
        """objs[r] (given on rank src) on rank r: each rank receives only its own."""
        if not self.enabled:
            assert objs is not None
            return objs[0]
        box: list[Any] = [None]
        dist.scatter_object_list(box, objs if self.rank == src else None, src=src, group=self.group)
        return box[0]

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on any rank (e.g. a SIGTERM seen by one)."""
        if not self.enabled:
            return flag
        t = torch.tensor([int(flag)], device=self._collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return bool(t.item())

    def sum(self, values: list[float]) -> list[float]:
        if not self.enabled:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(t, group=self.group)
        return [float(v) for v in t.tolist()]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier(group=self.group)

    def _collective_device(self) -> torch.device:
        return self.device() if dist.get_backend(self.group) == "nccl" else torch.device("cpu")


def init_from_env(timeout_minutes: float = 30.0, min_world: int = 2) -> Dist:
    """Join torchrun's process group when WORLD_SIZE >= min_world (NCCL on GPUs, gloo on the
    CPU); the trainer runs a world of one as a plain single process (min_world 2)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < min_world or "RANK" not in os.environ:
        return Dist()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    d = Dist(rank, world, local, joined=True)
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes))
    return d


def shutdown(d: Dist, failed: bool = False) -> None:
    """Leave the job's process groups. failed: this process is leaving on an error, while the
    others may be waiting in a collective for it. NCCL's orderly destroy then waits on them (2 x
    H200, 2026-11-28: a generating process whose rollout raised sat in destroy_process_group,
    the learner in its all-reduce, until the job's limit), so its communicators are aborted
    instead: the process exits, torchrun sees the failure and stops the others, and the error
    reaches the log. torch's abort is private (experimental in 2.11); without it, destroy."""
    if not (d.enabled and dist.is_initialized()):
        return
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    if failed and abort is not None and dist.get_backend() == "nccl":
        abort()
        return
    dist.destroy_process_group()


def spec_processes(spec: TrainingRunSpec) -> int:
    """Processes the operator launches for this spec: nodes x max(1, gpusPerNode)."""
    return spec.trainer.nodes * max(1, spec.trainer.gpus_per_node)


def check_world(spec: TrainingRunSpec, world: int, local_world: int) -> None:
    """Refuse, naming the fields, a launch the trainer cannot use as one job."""
    from kubecua_trainer.config import ConfigError  # pydantic: not needed by the GPU benches

    episodes = spec.algorithm.tasks_per_step * spec.algorithm.group_size
    wanted = spec_processes(spec)
    if wanted > episodes:
        raise ConfigError(
            f"spec.trainer: nodes x gpusPerNode asks for {wanted} processes but a step has only "
            f"{episodes} episodes (algorithm.tasksPerStep x groupSize); every process needs at "
            "least one: lower trainer.nodes/gpusPerNode or raise tasksPerStep/groupSize"
        )
    if world != wanted:
        raise ConfigError(
            f"launched as {world} process(es) but spec.trainer asks for {wanted} "
            f"(nodes {spec.trainer.nodes} x gpusPerNode {spec.trainer.gpus_per_node}); "
            "launch it the way the operator does (torchrun with PET_NNODES/PET_NPROC_PER_NODE)"
        )
    if world > 1 and spec.trainer.gpus_per_node > 0:
        have = torch.cuda.device_count()
        if local_world > have:
            raise ConfigError(
                f"spec.trainer.gpusPerNode: {local_world} processes on this node but only {have} "
                "GPU(s) are visible"
            )


def episode_owner(index: int, world: int) -> int:
    """The rank that plays a step's episode number `index` (task-major order): round-robin, so
    each task's group is spread over the ranks and every rank gets within one of the others."""
    return index % world


def balance_by_tokens(lengths: list[int], world: int) -> list[list[int]]:
    """Split sample indices over `world` ranks so their token totals are close (longest first,
    each to the least-loaded rank). Example: lengths [9, 5, 4, 3, 1], 2 ranks -> [[0, 4], [1, 2, 3]]
    (10 and 12 tokens)."""
    heap = [(0, r) for r in range(world)]
    shares: list[list[int]] = [[] for _ in range(world)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        load, r = heapq.heappop(heap)
        shares[r].append(i)
        heapq.heappush(heap, (load + lengths[i], r))
    return [sorted(s) for s in shares]
