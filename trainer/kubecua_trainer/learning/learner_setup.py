"""A run's policy, learner and the engine's policy, with the speed-ups the spec asks for or, where
it leaves them out, the ones chosen for the model, the sample and the GPU (speedups/choice.py)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from kubecua_trainer.config import TrainingRunSpec
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.sharded import generation_copy, shard_policy
from kubecua_trainer.lora import add_adapter
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.parallel.distributed import Dist
from kubecua_trainer.speedups.checkpointing import set_checkpointing
from kubecua_trainer.speedups.choice import Choice, Workload, choose, sample_tokens, shape_of
from kubecua_trainer.speedups.fast_paths import compile_layers
from kubecua_trainer.speedups.optimizer import MasterAdamW

log = logging.getLogger(__name__)


def build_learner(spec: TrainingRunSpec) -> tuple[Policy, Learner, Policy | None]:
    """One process: (policy, learner, the engine's own copy or None). The embedded engine
    generates with the learner's module, except when rollouts overlap learning
    (rollout.maxStaleness > 0): it then gets a full copy of the weights (bf16 on a GPU),
    refreshed after each update, so generation does not wait for the update to finish."""
    policy = load_policy(spec.model.path, spec.model.dtype, None)
    with_adapter(policy, spec)
    reference = _reference(spec, policy)
    overlap = spec.rollout.max_staleness > 0 and spec.rollout.engine == "hf"
    choice = learner_choice(spec, policy, world=1, engine_copy=overlap)
    gen = generation_copy(policy) if overlap else None
    optimizer = speed_up(policy, spec, choice)
    return policy, Learner(policy, spec.algorithm, reference, optimizer=optimizer), gen


def build_sharded_learner(
    spec: TrainingRunSpec, d: Dist, mesh: Any = None
) -> tuple[Policy, Learner, Policy | None]:
    """Under torchrun: (policy, learner, the engine's policy). The learner's module is sharded
    with FSDP2 and the engine gets a full copy of it, refreshed after every update. mesh: the
    learning processes of the disaggregated placement (disaggregated.py), which hold no engine
    (the engine's policy is then None)."""
    device = str(d.device())
    policy = load_policy(spec.model.path, spec.model.dtype, device)
    with_adapter(policy, spec)
    reference = _reference(spec, policy)
    engine_copy = mesh is None
    choice = learner_choice(spec, policy, world=d.world, engine_copy=engine_copy)
    _checkpoint(policy, choice)
    gen = generation_copy(policy) if engine_copy else None
    if spec.model.freeze_vision:
        policy.model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    if choice.compile and policy.device.type == "cuda":
        compile_layers(policy.model)
    net = shard_policy(policy, offload=choice.optimizer_offload, mesh=mesh)
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


def explicit(cfg: Any, name: str) -> bool | None:
    """A trainer field's value where the spec sets it, None (choose) where it is left out."""
    value = getattr(cfg, name)
    return value if name in cfg.model_fields_set else None


def learner_choice(spec: TrainingRunSpec, policy: Policy, world: int, engine_copy: bool) -> Choice:
    """compile, checkpointing and offload: the spec's where set, else chosen for this model, the
    largest sample the rollout settings allow and this GPU (speedups/choice.py); logged."""
    model: Any = policy.model
    a, r = spec.algorithm, spec.rollout
    images = a.max_turns if a.mode == "trajectory" else min(r.keep_screenshots, a.max_turns)
    cuda = policy.device.type == "cuda"
    workload = Workload(
        tokens=sample_tokens(a.max_turns, r.max_pixels, a.max_new_tokens, images),
        image_tokens=images * (r.max_pixels // 784),
        param_bytes=2 if spec.model.dtype == "bfloat16" else 4,
        cuda=cuda,
        total_bytes=torch.cuda.get_device_properties(policy.device).total_memory if cuda else 0,
        world=world,
        engine_copy=engine_copy,
    )
    params = sum(p.numel() for p in model.parameters())
    t = spec.trainer
    choice = choose(
        shape_of(model.config, params),
        workload,
        compile_=explicit(t, "compile"),
        checkpointing=explicit(t, "gradient_checkpointing"),
        offload=explicit(t, "optimizer_offload"),
    )
    log.info(
        "learner: compile %s, checkpointing text %g vision %g, optimizer offload %s "
        "(estimated peak %.1f of %.1f GiB for %d tokens; %s)",
        choice.compile, choice.text_checkpointing, choice.vision_checkpointing,
        choice.optimizer_offload, choice.estimate_gib, choice.budget_gib, workload.tokens,
        choice.why,
    )  # fmt: skip
    return choice


def _checkpoint(policy: Policy, choice: Choice) -> None:
    if choice.text_checkpointing > 0 or choice.vision_checkpointing > 0:
        set_checkpointing(policy.model, choice.text_checkpointing, choice.vision_checkpointing)


def speed_up(policy: Policy, spec: TrainingRunSpec, choice: Choice) -> torch.optim.Optimizer | None:
    """The learner levers measured in docs/benchmarks.md, as chosen; returns the optimizer to
    use, or None for the learner's default AdamW."""
    model = policy.model
    _checkpoint(policy, choice)
    if spec.model.freeze_vision:
        model.model.visual.requires_grad_(False)  # type: ignore[union-attr]
    if choice.compile and policy.device.type == "cuda":
        compile_layers(model)
    if not choice.optimizer_offload:
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
