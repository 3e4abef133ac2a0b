"""One rank of a disaggregated run for tests/test_disaggregated.py (under torchrun: gloo on the
CPU, NCCL on GPUs): it runs the trainer's own loop (train.train) on a manifest and, after every
step, writes a line to <out>/rank-<r>.jsonl with this process's role, the step, the version of
the weights it holds (Policy.version), and a SHA-256 of every trainable parameter at the engine's
dtype (bf16 on a GPU, as the broadcast sends it; the learner's own on the CPU), gathered whole
where FSDP2 sharded it: the learner's after its update and the broadcast, the generator's after
it took the broadcast. The test compares them across ranks bit for bit.

Run: `torchrun --nproc-per-node 2 -m bench.testing.disaggregated_check run.yaml out/`
(KUBECUA_SANDBOX_TOKEN: the desktops' token).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from kubecua_trainer.config import load_manifest
from kubecua_trainer.learning.sharded import _full, engine_dtype
from kubecua_trainer.run.train import RunOptions, train


def digest(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> str:
    """SHA-256 over the trainable parameters' names and bytes at `dtype`, in order (collective
    where the parameters are sharded: every learner calls it; gathered on `device`, since with
    trainer.optimizerOffload the shards live in host memory, which NCCL cannot gather)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        full = _full(p.detach().to(device, dtype)).contiguous().cpu()
        h.update(name.encode())
        h.update(full.view(torch.uint8).numpy().tobytes() if full.numel() else b"")
    return h.hexdigest()


def main(manifest: str, out: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    built: dict[str, Any] = {}
    log = Path(out) / f"rank-{rank}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)

    def on_built(engine: Any, learner: Any) -> None:
        built["policy"], built["engine"] = learner.policy, engine

    def on_step(step: int, stats: dict[str, Any]) -> None:
        policy = built["policy"]
        row = {
            "rank": rank,
            "engine": type(built["engine"]).__name__,
            "step": step,
            "version": policy.version,
            # at the engine's dtype: what the generators hold (on a GPU the learner's fp32
            # masters cast to bf16, as the broadcast sends them; on the CPU the learner's own)
            "digest": digest(policy.model, policy.device, engine_dtype(policy)),
            "staleness_max": stats.get("staleness_max"),
            "episodes": stats.get("episodes"),
            "loss": stats.get("loss"),
            "broadcast_seconds": stats.get("weight_broadcast_seconds"),
        }
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")

    opts = RunOptions(console=False, on_built=on_built, on_step=on_step)
    result = asyncio.run(train(load_manifest(manifest), opts))
    print(json.dumps({"rank": rank, "main": result.main, "steps": len(result.history)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
