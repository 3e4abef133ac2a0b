"""Smoke run of the ML core on any device: tiny model, batched hf engine, GRPO token bandit, resume.

What it does: builds a tiny model, runs N GRPO steps on the token bandit (bench/testing/bandit.py:
reward = fraction of sampled ids in a fixed set) with the real engine, Conversation, the batch a
run trains with (batch.assemble_batch) and Learner, saves a checkpoint and reloads it, and prints
one JSON line of figures (reward per step, rollout tokens/s: prompts and generation, learner
seconds, log-prob mismatch between trainer and engine, peak GPU memory).
What it leaves out: desktops, rollout, config files (that is the trainer's `make demo`).
How to run: `python -m bench.testing.smoke --device cuda --steps 12` (bf16 on CUDA).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from typing import Any

import torch

from bench.testing.bandit import play_bandit
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.batch import assemble_batch, episodes_of
from kubecua_trainer.learning.checkpoint import load_checkpoint, save_checkpoint
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.model import load_policy
from kubecua_trainer.tiny_models import build_tiny_model


def run(device: str | None, steps: int, family: str, lr: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(f"{tmp}/model", family)
        policy = load_policy(str(path), device=device, gradient_checkpointing=True)
        algo = AlgorithmConfig(learning_rate=lr, group_size=8)
        learner = Learner(policy, algo)
        rewards, tok_s, learn_s, mismatch = [], [], [], []

        async def train() -> None:
            engine = HFEngine(policy)
            for step in range(steps):
                t0 = time.perf_counter()
                groups = await play_bandit(engine, policy, step, 2, algo.group_size)
                seconds = time.perf_counter() - t0
                episodes = episodes_of(groups)
                rewards.append(sum(float(e.reward or 0.0) for e in episodes) / len(episodes))
                batch = assemble_batch(groups, algo, None)
                m = await asyncio.to_thread(learner.step, batch.samples)
                generated = sum(int(s.loss_mask.sum()) for e in episodes for s in e.samples)
                tok_s.append(generated / seconds)
                learn_s.append(m["seconds"])
                mismatch.append(m["logprob_mismatch"])
            await engine.close()

        asyncio.run(train())
        ckpt = save_checkpoint(f"{tmp}/ckpt", steps, policy, learner, SuccessReplay())
        state = load_checkpoint(ckpt, policy, learner, SuccessReplay())
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return {
        "device": str(policy.device), "dtype": str(policy.dtype), "family": family,
        "reward_per_step": [round(r, 3) for r in rewards],
        "rollout_tokens_per_s": round(sum(tok_s) / len(tok_s), 1),
        "learner_step_s": round(sum(learn_s) / len(learn_s), 3),
        "logprob_mismatch_mean": float(f"{sum(mismatch) / len(mismatch):.3e}"),
        "resumed_step": state["step"], "peak_gpu_bytes": peak,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--family", choices=("qwen2_5_vl", "qwen3_vl"), default="qwen2_5_vl")
    parser.add_argument("--lr", type=float, default=2e-2)
    args = parser.parse_args()
    print(json.dumps(run(args.device, args.steps, args.family, args.lr)))


if __name__ == "__main__":
    main()
