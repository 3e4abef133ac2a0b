"""The disaggregated placement's weight sync (placement.py): after each update the learning
processes gather every sharded parameter (FSDP2, one all-gather each among themselves) and
learner 0 broadcasts it to the generating processes, NCCL on GPUs and gloo on the CPU, with the
step it belongs to as the weights' version.

A generator receives into buffers of its own, outside the engine's lock, so the rollouts that
play ahead (rollout.maxStaleness) keep generating with the previous weights while the learners
still train; only the final copy into the engine's parameters holds the lock, and it sets
Policy.version, so a generation never mixes two versions and every sample records the version
it came from (tokens.Sample.policy_version). Frozen parameters (a LoRA base, a frozen vision
tower) are the same on both sides from the start and are not sent.

Collective order (distributed.py's rule): every process calls updated(step) from the training
loop at the same point of the same step, never from a rollout task.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from kubecua_trainer.learning.sharded import _full, engine_dtype
from kubecua_trainer.parallel.threads import to_thread_on

if TYPE_CHECKING:
    from kubecua_trainer.model import Policy


@dataclass
class WeightBroadcast:
    """One per process of a disaggregated run. policy: the learner's (sharded) policy on a
    learning process, the engine's on a generating one. group: learner 0 and the generators."""

    policy: Policy
    group: Any
    learns: bool
    is_source: bool  # learner 0: the one learner in the group
    names: list[str] | None = None  # the parameters sent, in order (learner 0's, once)
    _buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    received: list[int] = field(default_factory=list)  # versions a generator took, in order

    async def updated(self, step: int) -> dict[str, float]:
        """The learners hold `step`'s weights: send them (learners) or take them (generators)."""
        work = self._send if self.learns else self._receive
        # on this process's GPU: NCCL's object broadcasts use the thread's current device
        seconds = await to_thread_on(self.policy.device, work, step)
        return {"weight_broadcast_seconds": seconds}

    async def checkpointed(self, step: int, checkpoint: str | None) -> None:
        return None

    def _device(self) -> torch.device:
        return self.policy.device if dist.get_backend(self.group) == "nccl" else torch.device("cpu")

    def _agree_names(self) -> list[str]:
        """The trainable parameters' names, learner 0's, once (both sides iterate them)."""
        if self.names is None:
            mine = [n for n, p in self.policy.model.named_parameters() if p.requires_grad]
            box: list[Any] = [mine if self.is_source else None]
            if self.is_source or not self.learns:  # the other learners are not in the group
                dist.broadcast_object_list(box, src=0, group=self.group)
            self.names = list(box[0]) if box[0] is not None else mine
        return self.names

    @torch.no_grad()
    def _send(self, step: int) -> float:
        start = time.perf_counter()
        names = set(self._agree_names())
        model = self.policy.model
        dtype = engine_dtype(self.policy)  # what the generators hold
        with self.policy.lock:  # the step's deferred optimizer update, if any, is done
            if self.is_source:
                version = torch.tensor([step], dtype=torch.int64, device=self._device())
                dist.broadcast(version, src=0, group=self.group)
            for name, p in model.named_parameters():
                if name not in names:
                    continue
                # every learner takes part in the all-gather; learner 0 alone sends the result.
                # On the GPU first: with trainer.optimizerOffload the shards live in host memory.
                to = dtype if p.is_floating_point() else p.dtype
                full = _full(p.detach().to(self.policy.device, to))
                if self.is_source:
                    dist.broadcast(full.contiguous().to(self._device()), src=0, group=self.group)
                del full
            self._landed()
        return time.perf_counter() - start

    @torch.no_grad()
    def _receive(self, step: int) -> float:
        start = time.perf_counter()
        names = self._agree_names()
        params = dict(self.policy.model.named_parameters())
        dev = self._device()
        version = torch.zeros(1, dtype=torch.int64, device=dev)
        dist.broadcast(version, src=0, group=self.group)
        for name in names:
            buf = self._buffers.get(name)
            if buf is None:
                p = params[name]
                buf = self._buffers[name] = torch.empty(p.shape, dtype=p.dtype, device=dev)
            dist.broadcast(buf, src=0, group=self.group)
        got = int(version.item())
        if got != step:  # the loops went out of step: the weights would be mislabelled
            raise RuntimeError(f"weights of step {got} broadcast where step {step} was due")
        with self.policy.lock:  # the engine steps (and captures its CUDA graphs) under it
            for name in names:
                params[name].copy_(self._buffers[name])
            self.policy.version = got
            self._landed()
        self.received.append(got)
        return time.perf_counter() - start

    def _landed(self) -> None:
        """Wait for this thread's copies and broadcasts, on its own stream only. Not
        torch.cuda.synchronize: a device-wide sync would also wait on a CUDA graph the engine's
        thread may be capturing, which voids the capture (gpu_share.py's capture fence exists
        for the same reason). Under the policy's lock on a generator, so no capture is under
        way. The broadcasts joined this stream when they were issued (ProcessGroupNCCL), so its
        sync covers them."""
        if self.policy.device.type == "cuda":
            torch.cuda.current_stream(self.policy.device).synchronize()
