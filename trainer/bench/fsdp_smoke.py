"""Multi-GPU smoke: the learner step sharded with FSDP2 over N GPUs equals the one-GPU step.

What it does: every rank builds the same random-weight Qwen2.5-VL-3B-shaped model (same seed) and
the same global batch (one 2-screenshot 1280x720 trajectory per rank). Rank 0 first runs two
plain Learner.step calls on one GPU over the whole batch (the reference); then all ranks shard the
model with fully_shard (each decoder layer and vision block, then the root; fp32 gradient
reduction), each runs forward+backward on its own trajectory with the global token weights, and
the same clipping and AdamW follow. Rank 0 prints one JSON line comparing the two runs' loss and
grad norm at step 1 and loss at step 2 (after the first update), and exits 1 past the tolerance
(2e-2 relative: bf16 weights, and a different summation order of the gradients).
What it leaves out: CPU offload under FSDP (speedups/optimizer.py is the one-GPU offload), compile.
How to run: `torchrun --nproc-per-node 2 -m bench.fsdp_smoke` (with PYTHONPATH=.).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from bench.cases import ALGO
from bench.shapes import bench_policy, build_model, synthetic_sample
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.learning.loss import LossCoefficients, token_loss
from kubecua_trainer.model import Policy
from kubecua_trainer.speedups.checkpointing import layer_stacks, set_checkpointing
from kubecua_trainer.speedups.fast_paths import apply_fast_paths
from kubecua_trainer.tokens import Sample

TOLERANCE = 2e-2


class LogprobNet(torch.nn.Module):
    """The model behind one forward() that returns the trained tokens' log-probs, so FSDP's root
    hooks gather the embeddings and the (tied) LM head for the whole chunked head computation."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.policy = policy
        self.model = policy.model

    def forward(self, sample: Sample) -> torch.Tensor:
        with self.policy.autocast():
            return token_logprobs(self.policy, sample, ALGO.temperature)[0]


def fresh_policy() -> Policy:
    torch.manual_seed(0)
    model = build_model("qwen2_5_vl_3b", "cuda")
    apply_fast_paths(model)
    set_checkpointing(model, 0.0, 0.0)  # 2.6k tokens per rank fit without it
    return bench_policy(model)


def make_batch(model: Any, world: int) -> list[Sample]:
    return [synthetic_sample(model, 2, 1280, 720, seed) for seed in range(world)]


def reference(world: int) -> list[dict[str, float]]:
    """Two plain one-GPU learner steps over the whole global batch."""
    policy = fresh_policy()
    learner = Learner(policy, ALGO)
    batch = make_batch(policy.model, world)
    out = [learner.step(batch) for _ in range(2)]
    del learner, policy
    torch.cuda.empty_cache()
    return out


def sharded_steps(rank: int, world: int) -> list[dict[str, float]]:
    policy = fresh_policy()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for stack in layer_stacks(policy.model):
        for layer in stack:
            fully_shard(layer, mp_policy=mp)
    net = LogprobNet(policy)
    fully_shard(net, mp_policy=mp)
    optimizer = torch.optim.AdamW(net.parameters(), lr=ALGO.learning_rate, weight_decay=0.0)
    batch = make_batch(policy.model, world)
    total = sum(int(s.loss_mask.sum()) for s in batch)
    mine = batch[rank]
    out = []
    net.train()
    for _ in range(2):
        logp = net(mine)
        behaviour = mine.behaviour_logprobs[mine.loss_mask].to(logp.device)
        coefs = LossCoefficients(ALGO.clip.low, ALGO.clip.high, ALGO.tis_cap)
        terms = token_loss(logp, logp.detach(), behaviour, mine.advantage, coefs)
        loss = terms.loss.sum() / total
        (loss * world).backward()  # FSDP averages gradients over ranks; we want their sum
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), ALGO.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        summed = loss.detach().clone()
        dist.all_reduce(summed)
        full = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        out.append({"loss": float(summed), "grad_norm": float(full)})
    return out


def rel(a: float, b: float) -> float:
    """|a - b| / |b|. Example: rel(1.01, 1.0) = 0.01."""
    return abs(a - b) / max(abs(b), 1e-12)


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    ref = reference(world) if rank == 0 else []
    dist.barrier()
    got = sharded_steps(rank, world)
    if rank == 0:
        diffs = {"loss_step1": rel(got[0]["loss"], ref[0]["loss"]),
                 "grad_norm_step1": rel(got[0]["grad_norm"], ref[0]["grad_norm"]),
                 "loss_step2": rel(got[1]["loss"], ref[1]["loss"])}  # fmt: skip
        ok = all(d <= TOLERANCE for d in diffs.values())
        keep = ("loss", "grad_norm", "tokens", "seconds")
        print(json.dumps({"world": world, "tolerance": TOLERANCE, "pass": ok,
                          "one_gpu": [{k: r[k] for k in keep} for r in ref],
                          "fsdp2": got, "relative_diff": diffs}), flush=True)  # fmt: skip
        if not ok:
            sys.exit(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
