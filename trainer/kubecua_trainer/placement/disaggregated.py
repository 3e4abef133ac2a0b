"""The disaggregated placement's processes (placement.py): their process groups, and what each
one builds.

- a learning process: the FSDP2 learner of build_sharded_learner, sharded over the learning
  processes only (a DeviceMesh of their group), and no engine (NoEngine);
- a generating process: the policy at the engine's dtype (bf16 on a GPU), the embedded engine
  over it, and a Learner that never steps (the run's context is the same object on every
  process; AdamW makes its state at the first step, so it holds no memory here).
Every process joins the two groups at start-up, in the same order (torch.distributed.new_group
is collective over the whole job): the learners' (FSDP2, their checkpoints and their sums) and
learner 0 with the generators' (weight_broadcast.py). The loop's own collectives (the rollout's
exchange, stops, the cost sums) stay on the whole job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.sharded import engine_dtype
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.parallel.distributed import Dist
from kubecua_trainer.placement.placement import Placement

if TYPE_CHECKING:
    from kubecua_trainer.config import TrainingRunSpec


@dataclass(frozen=True)
class Roles:
    """This process's part: the placement, and the Dist its learner and checkpoints use (the
    learners' group; the whole job when colocated)."""

    placement: Placement
    rank: int
    learner_dist: Dist
    weights_group: Any = None  # learner 0 and the generators (disaggregated)

    @property
    def learns(self) -> bool:
        return self.placement.learns(self.rank)

    @property
    def generates(self) -> bool:
        return self.placement.generates(self.rank)

    @property
    def share(self) -> tuple[int, int] | None:
        return self.placement.share(self.rank)


def join_roles(placement: Placement, d: Dist) -> Roles:
    """Every process calls it once, at start-up (the groups are made collectively)."""
    if not placement.disaggregated:
        return Roles(placement, d.rank, d)
    learners = dist.new_group(placement.learners)
    weights = dist.new_group([0, *placement.generators])
    if placement.learns(d.rank):
        group = Dist(d.rank, len(placement.learners), d.local_rank, joined=True, group=learners)
    else:
        group = Dist()  # a generator writes no checkpoint and takes no learner collective
    in_weights = d.rank == 0 or not placement.learns(d.rank)
    return Roles(placement, d.rank, group, weights if in_weights else None)


def build_generator(spec: TrainingRunSpec, d: Dist) -> tuple[Policy, Learner]:
    """A generating process's policy (the engine's weights, replaced by each broadcast) and its
    idle learner."""
    from kubecua_trainer.learning.learner_setup import with_adapter

    policy = load_policy(spec.model.path, spec.model.dtype, str(d.device()))
    with_adapter(policy, spec)  # the same parameter names as the learners' (LoRA's included)
    if spec.model.freeze_vision:  # the same trainable set: frozen weights are never sent
        policy.model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    first = next(policy.model.parameters())
    dtype = engine_dtype(policy)
    if dtype != first.dtype:
        policy.model.to(dtype)
    # kl_coef 0: a Learner with a KL term wants a reference policy, and this one never steps
    algo = spec.algorithm.model_copy(update={"kl_coef": 0.0})
    return policy, Learner(policy, algo)


def learner_mesh(roles: Roles, policy_device: Any) -> Any:
    """The learning processes' DeviceMesh for FSDP2."""
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(roles.learner_dist.group, policy_device.type)


class NoEngine:
    """A learning process's engine: it generates nothing (the generators play every episode)."""

    async def generate(
        self, prompt_ids: list[int], images: list[Any], sampling: SamplingParams
    ) -> Generation:
        raise RuntimeError("a learning process of the disaggregated placement generates nothing")

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None:
        return None

    def forget_cache(self, timeout: float = 0.0) -> bool:
        return True

    async def close(self) -> None:
        return None
