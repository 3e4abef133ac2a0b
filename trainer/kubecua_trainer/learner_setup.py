"""A run's policy, learner and the engine's policy, with the speed-ups the spec asks for."""

from __future__ import annotations

import torch

from kubecua_trainer.config import TrainingRunSpec
from kubecua_trainer.distributed import Dist
from kubecua_trainer.learner import Learner
from kubecua_trainer.lora import add_adapter
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.sharded import generation_copy, shard_policy
from kubecua_trainer.speedups.fast_paths import compile_layers
from kubecua_trainer.speedups.optimizer import MasterAdamW


def build_learner(spec: TrainingRunSpec) -> tuple[Policy, Learner, Policy | None]:
    """One process: (policy, learner, the engine's own copy or None). The embedded engine
    generates with the learner's module, except when rollouts overlap learning
    (rollout.maxStaleness > 0): it then gets a full copy of the weights (bf16 on a GPU),
    refreshed after each update, so generation does not wait for the update to finish."""
    policy = load_policy(
        spec.model.path, spec.model.dtype, None, spec.trainer.gradient_checkpointing
    )
    with_adapter(policy, spec)
    reference = _reference(spec, policy)
    overlap = spec.rollout.max_staleness > 0 and spec.rollout.engine == "hf"
    gen = generation_copy(policy) if overlap else None
    optimizer = speed_up(policy, spec)
    return policy, Learner(policy, spec.algorithm, reference, optimizer=optimizer), gen


def build_sharded_learner(spec: TrainingRunSpec, d: Dist) -> tuple[Policy, Learner, Policy]:
    """Under torchrun: (policy, learner, the engine's policy). The learner's module is sharded
    with FSDP2 and the engine gets a full copy of it, refreshed after every update."""
    device = str(d.device())
    policy = load_policy(
        spec.model.path, spec.model.dtype, device, spec.trainer.gradient_checkpointing
    )
    with_adapter(policy, spec)
    reference = _reference(spec, policy)
    gen = generation_copy(policy)
    if spec.model.freeze_vision:
        policy.model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    if spec.trainer.compile and policy.device.type == "cuda":
        compile_layers(policy.model)
    net = shard_policy(policy, offload=spec.trainer.optimizer_offload)
    return policy, Learner(policy, spec.algorithm, reference, net=net, dist=d), gen


def with_adapter(policy: Policy, spec: TrainingRunSpec) -> None:
    """spec.model.lora: a fresh adapter in the policy (lora.py), before the engine's copy, the
    optimizer and FSDP2 see the model; the reference policy stays the base, which the fresh
    adapter (B = 0) equals."""
    if spec.model.lora is not None:
        add_adapter(policy.model, spec.model.lora, spec.model.path, spec.rollout.engine)


def _reference(spec: TrainingRunSpec, policy: Policy) -> Policy | None:
    if spec.algorithm.kl_coef <= 0:
        return None
    # k3 KL needs a frozen copy of the initial policy
    return load_policy(spec.model.path, spec.model.dtype, device=str(policy.device))


def speed_up(policy: Policy, spec: TrainingRunSpec) -> torch.optim.Optimizer | None:
    """The learner levers measured in docs/benchmarks.md, as the spec asks for them; returns the
    optimizer to use, or None for the learner's default AdamW."""
    model = policy.model
    if spec.model.freeze_vision:
        model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    if spec.trainer.compile and policy.device.type == "cuda":
        compile_layers(model)
    if not spec.trainer.optimizer_offload:
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    lr = spec.algorithm.learning_rate
    return MasterAdamW(params, lr=lr, offload=True, defer=defers_update(spec))


def defers_update(spec: TrainingRunSpec) -> bool:
    """Whether the host update runs after the step (MasterAdamW defer; the same bits): only
    where its next reader comes later, the embedded engine's first generation of the next
    synchronous step, after the desktops' set-up. With rollout.maxStaleness > 0 the engine's
    copy is refreshed at once, and sglang reads the step's weights from disk at once: the update
    would be waited for straight away, and in a worker thread it ran slower on an H100's host
    (2.6 s against 1.7 s, docs/benchmarks.md)."""
    return spec.rollout.engine == "hf" and spec.rollout.max_staleness == 0
