"""How the engine gets the learner's weights: one WeightSync per engine.

The loop calls updated(step) right after the learner's update of `step` (also at the start, with
the resumed or initial step, and after the warm-up, step 0), then checkpointed(step, dir) once
the step's checkpoint is written (dir) or skipped (None); resumed and warmed starts pass the
checkpoint they start from.

- InProcess (the embedded HF engine): the engine generates with the learner's policy, or with a
  copy of it (rollout.maxStaleness > 0, or under torchrun) that is refreshed on updated().
- WeightBroadcast (the disaggregated placement, weight_broadcast.py): learner 0 broadcasts each
  step's weights to the generating processes.
- FromDisk (sglang): every step's weights go to the servers through /update_weights_from_disk of
  a directory on the volume they mount (engines/sglang.py says why not NCCL); the sglang engine
  has no NCCL path, so there is no NCCL sync. The trainer's own policy object for the rollouts
  (tokenizer, image sizes) needs no weights, so under torchrun its copy is not refreshed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kubecua_trainer.engines.base import Engine
from kubecua_trainer.engines.sglang import SGLangEngine
from kubecua_trainer.learning.sharded import refresh_weights
from kubecua_trainer.parallel.threads import to_thread_on

if TYPE_CHECKING:
    from kubecua_trainer.model import Policy
    from kubecua_trainer.parallel.distributed import Dist
    from kubecua_trainer.placement.disaggregated import Roles


class WeightSync(Protocol):
    async def updated(self, step: int) -> dict[str, float]:
        """The learner holds `step`'s weights; returns timings for the step's stats."""
        ...

    async def checkpointed(self, step: int, checkpoint: str | None) -> None:
        """`step`'s checkpoint directory, or None when this step wrote none."""
        ...


class InProcess:
    def __init__(self, policy: Policy, gen: Policy):
        self.policy, self.gen = policy, gen  # gen is policy when the engine shares it

    async def updated(self, step: int) -> dict[str, float]:
        if self.gen is self.policy:  # shared: the learner labelled it (Policy.version)
            return {}
        seconds = await to_thread_on(self.policy.device, self._refresh, step)
        return {"weight_refresh_seconds": seconds}

    def _refresh(self, step: int) -> float:
        with self.policy.lock:  # the step's deferred optimizer update has finished
            return refresh_weights(self.policy.model, self.gen, step)

    async def checkpointed(self, step: int, checkpoint: str | None) -> None:
        return None


class FromDisk:
    """weights(step, checkpoint) gives a directory with `step`'s weights: the checkpoint when
    there is one, else a weights-only copy (Saver.weights_for_engine; collective)."""

    def __init__(self, engine: SGLangEngine, weights: Callable[[int, str | None], str], dist: Dist):
        self.engine, self.weights, self.dist = engine, weights, dist

    async def updated(self, step: int) -> dict[str, float]:
        return {}  # the servers load the step once its directory is written

    async def checkpointed(self, step: int, checkpoint: str | None) -> None:
        path = self.weights(step, checkpoint)
        if self.dist.is_main:
            await self.engine.update_weights(step, path)
        self.dist.barrier()  # the servers hold step's weights before any rank says so
        self.engine.weights_step = step


def build_weight_sync(
    engine: Engine,
    policy: Policy,
    gen: Policy,
    weights: Callable[[int, str | None], str],
    dist: Dist,
    roles: Roles | None = None,
) -> WeightSync:
    if roles is not None and roles.placement.disaggregated:
        from kubecua_trainer.weights.weight_broadcast import WeightBroadcast

        return WeightBroadcast(gen, roles.weights_group, roles.learns, is_source=dist.is_main)
    if isinstance(engine, SGLangEngine):
        return FromDisk(engine, weights, dist)
    return InProcess(policy, gen)
