"""The FSDP2 side of a distributed run: shard the learner's model, gather it back.

- shard_policy: fully_shard on every decoder layer and vision block, then on a root module whose
  forward is the learner's whole log-prob computation (so the root's hooks gather the embeddings
  and the LM head for it). bf16 compute with fp32 gradient reduction when the parameters are fp32
  on a GPU (model.dtype auto), as the single-process autocast does; parameters, gradients and
  the AdamW step in host memory with trainer.optimizerOffload (FSDP2's CPUOffloadPolicy).
- refresh_weights: after each update every rank's generation copy (a full, unsharded module used
  by the hf engine) receives the new weights in memory, one all-gather per parameter.
- full_state / load_full_state: the gathered state for rank 0's HF checkpoint, and its way back
  into the shards (rank 0 reads, the others receive), whatever the world size was when written.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.lora import is_lora
from kubecua_trainer.model import Policy
from kubecua_trainer.speedups.checkpointing import layer_stacks
from kubecua_trainer.tokens import Sample


class LogprobNet(torch.nn.Module):
    """FSDP2's root: forward(sample, temperature) -> log-probs and entropies of trained tokens."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.policy = policy
        self.model = policy.model

    def forward(self, sample: Sample, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        with self.policy.autocast():
            return token_logprobs(self.policy, sample, temperature)


def generation_copy(policy: Policy) -> Policy:
    """A full copy of the (not yet sharded) policy for the engine; bf16 on a GPU (generation
    needs no fp32 master), the learner's dtype on the CPU so a refresh is bitwise."""
    model = copy.deepcopy(policy.model)
    dtype = engine_dtype(policy)
    if dtype != next(model.parameters()).dtype:
        model.to(dtype)
    model.eval()
    return Policy(model, policy.processor, policy.tokenizer, policy.device, policy.dtype)


def engine_dtype(policy: Policy) -> torch.dtype:
    """The dtype of the engine's weights for `policy` (the learner's, or a generating process's
    as loaded): bf16 on a GPU when the run computes in bf16 (autocast: generation needs no fp32
    master), else the parameters' own, so that a run asking for float32 (model.dtype) generates
    in float32, and on the CPU a refresh or a broadcast is bitwise. (A bf16 copy of a
    float32-compute policy ran without autocast: float32 inputs met bf16 weights.)"""
    if policy.device.type == "cuda" and policy.dtype == torch.bfloat16:
        return torch.bfloat16
    return next(policy.model.parameters()).dtype


def shard_policy(policy: Policy, offload: bool = False, mesh: Any = None) -> LogprobNet:
    """mesh: a DeviceMesh of the learning processes (placement disaggregated); None: all."""
    params_fp32 = next(policy.model.parameters()).dtype == torch.float32
    mp = None
    if policy.device.type == "cuda" and params_fp32 and policy.dtype == torch.bfloat16:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs: dict[str, Any] = {"mp_policy": mp} if mp is not None else {}
    if mesh is not None:
        kwargs["mesh"] = mesh
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for stack in layer_stacks(policy.model):
        for layer in stack:
            fully_shard(layer, **kwargs)
    net = LogprobNet(policy)
    fully_shard(net, **kwargs)
    return net


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


@torch.no_grad()
def refresh_weights(learner_model: torch.nn.Module, gen: Policy, version: int) -> float:
    """Copy the learner's current weights into the generation copy (collective: every rank
    calls it); returns the seconds it took. The engine is locked out meanwhile, so a generation
    never mixes two versions."""
    start = time.perf_counter()
    target = dict(gen.model.named_parameters())
    adapter_only = is_lora(learner_model)  # the frozen base is the same in both copies
    with gen.lock:
        for name, p in learner_model.named_parameters():
            if adapter_only and not p.requires_grad:
                continue
            dst = target[name]
            # Cast the shard before the all-gather: bf16 halves the traffic of fp32 masters.
            full = _full(p.detach().to(dst.dtype))
            dst.copy_(full.to(dst.device))
            del full
        gen.version = version
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


@torch.no_grad()
def full_state(
    learner_model: torch.nn.Module, keep: bool, names: set[str] | None = None
) -> dict[str, torch.Tensor]:
    """The gathered model state dict on the CPU where keep (rank 0); collective. names: only
    these entries (a LoRA adapter's), the same on every rank."""
    out: dict[str, torch.Tensor] = {}
    for name, t in learner_model.state_dict().items():
        if names is not None and name not in names:
            continue
        full = _full(t)
        if keep:
            out[name] = full.detach().cpu().clone()
        del full
    return out


@contextlib.contextmanager
def broadcasts_on(group: Any) -> Iterator[None]:
    """torch's set_model_state_dict / set_optimizer_state_dict with broadcast_from_rank0 (torch
    2.11) broadcast on the whole job and take no process group; in the disaggregated placement
    the learners are a subgroup (their rank 0 is the job's), and the generators, which hold no
    model, would receive those broadcasts in place of their own. So, for the call, torch's
    broadcast helper is given the learners' group. group None: the whole job, unchanged."""
    if group is None:
        yield
        return
    import torch.distributed.checkpoint.state_dict as sd

    original = sd._broadcast_state_dict
    sd._broadcast_state_dict = functools.partial(original, pg=group)
    try:
        yield
    finally:
        sd._broadcast_state_dict = original


def load_full_state(
    learner_model: torch.nn.Module,
    state: dict[str, torch.Tensor],
    strict: bool = True,
    group: Any = None,
) -> None:
    """Rank 0 passes the full state, the others {}; the shards are filled by broadcast (over
    group: the learners of the disaggregated placement). strict=False: the state covers part of
    the model (a LoRA adapter's)."""
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=strict)
    with broadcasts_on(group):
        set_model_state_dict(learner_model, dict(state), options=opts)


def optimizer_full_state(net: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """The optimizer state keyed by parameter names (world-size independent); full on rank 0."""
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(net, optimizer, options=opts)


def load_optimizer_full_state(
    net: torch.nn.Module, optimizer: Any, state: dict, group: Any = None
) -> None:
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    with broadcasts_on(group):
        set_optimizer_state_dict(net, optimizer, optim_state_dict=state, options=opts)
