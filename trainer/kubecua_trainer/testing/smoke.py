"""Smoke run of the ML core on any device: tiny model, batched hf engine, GRPO token bandit, resume.

What it does: builds a tiny model, runs N GRPO steps on the token bandit of tests/test_bandit.py
(reward = fraction of sampled ids in a fixed set) with the real engine, Conversation, advantages
and Learner, saves a checkpoint and reloads it, and prints one JSON line of figures (reward per
step, engine tokens/s, learner seconds, trainer/engine log-prob mismatch, peak GPU memory).
What it leaves out: desktops, rollout, config files (that is the trainer's `make demo`).
How to run: `python -m kubecua_trainer.testing.smoke --device cuda --steps 12` (bf16 on CUDA).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from types import SimpleNamespace
from typing import Any

import torch

from kubecua_trainer.advantage import assign_group_advantages
from kubecua_trainer.checkpoint import load_checkpoint, save_checkpoint
from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learner import Learner
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.replay import SuccessReplay
from kubecua_trainer.testing.images import screenshot
from kubecua_trainer.testing.tiny_models import build_tiny_model
from kubecua_trainer.tokens import Conversation, Sample

TARGET = set(range(100, 140))


def _algo(lr: float) -> Any:
    clip = SimpleNamespace(low=0.2, high=0.28)
    return SimpleNamespace(learning_rate=lr, clip=clip, tis_cap=2.0, kl_coef=0.0,
                           aggregation="token", temperature=1.0, max_grad_norm=1.0)  # fmt: skip


async def _collect(engine: HFEngine, policy: Policy, step: int, groups: int, size: int) -> Any:
    sampling = SamplingParams(max_new_tokens=3)
    convs = []
    for task in range(groups):
        for _ in range(size):
            conv = Conversation(policy, "Answer.", 56 * 56 * 2)
            conv.add_user(f"task {task}", screenshot(task))
            convs.append((task, conv))
    start = time.perf_counter()
    gens = await asyncio.gather(*(engine.generate(*c.prompt(), sampling) for _, c in convs))
    seconds = time.perf_counter() - start
    samples: list[Sample] = []
    for (task, conv), gen in zip(convs, gens, strict=True):
        conv.add_generation(gen)
        s = conv.to_sample()
        s.reward = sum(t in TARGET for t in gen.token_ids) / 3
        s.group_id = f"{step}-{task}"
        samples.append(s)
    return samples, sum(len(g.token_ids) for g in gens) / seconds


def run(device: str | None, steps: int, family: str, lr: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(f"{tmp}/model", family)
        policy = load_policy(str(path), device=device, gradient_checkpointing=True)
        learner = Learner(policy, _algo(lr))
        rewards, tok_s, learn_s, mismatch = [], [], [], []

        async def train() -> None:
            engine = HFEngine(policy)
            for step in range(steps):
                samples, rate = await _collect(engine, policy, step, 2, 8)
                rewards.append(sum(s.reward for s in samples) / len(samples))
                kept, _ = assign_group_advantages(samples)
                m = await asyncio.to_thread(learner.step, kept)
                tok_s.append(rate)
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
        "engine_tokens_per_s": round(sum(tok_s) / len(tok_s), 1),
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
