"""Offline calibration of the learning benchmark: the trainer's own pieces without desktops.

What it does: for each seed, warms the benchmark model up on the first train instances'
reference replies (Learner.supervised_step, as spec.warmup does), then runs GRPO steps on the
train instances (HFEngine sampling, tokens.Conversation samples, batch.assemble_batch,
Learner.step), and measures greedy success on the held-out instances at the start and the end,
with an LR-0 control. The reward is read from the reply (family.offline_reward: would the
action type exactly the word?) and every prompt shows one fixed real desktop screenshot, so a
run takes minutes, which is what choosing the model size, learning rate and steps needs.
What it leaves out: the desktops (`make bench-learning` runs the real pipeline).
How to run (from trainer/): nice -n 10 .venv/bin/python -m bench.learning.offline
MODEL_DIR SCREENSHOT.png [--seeds 0 1 2] [--steps 12] [--lr 3e-3] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

import torch
from PIL import Image

from bench.learning.family import (
    BENCH_PROMPT,
    load_split,
    offline_reward,
    reference_reply,
    warmup_tasks,
)
from kubecua_trainer.batch import assemble_batch
from kubecua_trainer.config import AlgorithmConfig, WarmupConfig
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learner import Learner
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.rollout.agent import first_user_text, system_prompt
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.tokens import Conversation, Sample, fit_image
from kubecua_trainer.warmup.sft import warmup_optimizer


class Offline:
    """One policy, its engine and learner, and the fixed screenshot every prompt shows."""

    def __init__(
        self,
        model: str,
        screenshot: Image.Image,
        algo: AlgorithmConfig,
        pixels: int,
        system: str | None = BENCH_PROMPT,
    ):
        self.policy: Policy = load_policy(model, dtype="float32", device="cpu")
        self.engine = HFEngine(self.policy)
        self.learner = Learner(self.policy, algo)
        self.algo, self.pixels = algo, pixels
        self.fuzzy = False
        self.eval_temperature, self.eval_episodes = 0.0, 1
        self.system = system  # None: the agent's whole prompt
        self.image = fit_image(screenshot, self.policy, pixels)

    def conversation(self, task: dict[str, Any]) -> Conversation:
        conv = Conversation(self.policy, system_prompt(*self.image.size, self.system), self.pixels)
        conv.add_user(first_user_text(task["instruction"]), self.image)
        return conv

    def demo_sample(self, task: dict[str, Any]) -> Sample:
        """The reference reply as a trained sample, as the warm-up builds a demonstration."""
        conv = self.conversation(task)
        ids = self.policy.tokenizer(reference_reply(task), add_special_tokens=False)["input_ids"]
        ids = [*ids, self.policy.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        conv.add_generation(Generation(list(ids), [0.0] * len(ids), "stop"))
        return conv.to_sample()

    async def play(self, task: dict[str, Any], temperature: float) -> tuple[float, Sample, str]:
        conv = self.conversation(task)
        ids, images = conv.prompt()
        stop = int(self.policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        sampling = SamplingParams(temperature, 1.0, self.algo.max_new_tokens, (stop,))
        gen = await self.engine.generate(ids, images, sampling)
        reply = self.policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        conv.add_generation(gen)
        reward = offline_reward(task, reply, self.fuzzy)
        sample = conv.to_sample()
        sample.reward = reward
        return reward, sample, reply

    async def success(self, tasks: list[dict[str, Any]]) -> float:
        """Success rate over the tasks at the evaluation temperature (greedy: one episode each,
        it is deterministic; sampled: `eval_episodes` each)."""
        n = 1 if self.eval_temperature == 0.0 else self.eval_episodes
        plays = [self.play(t, self.eval_temperature) for t in tasks for _ in range(n)]
        results = await asyncio.gather(*plays)
        return sum(r >= 1.0 for r, _, _ in results) / len(results)

    def warm_up(self, tasks: list[dict[str, Any]], cfg: WarmupConfig, seed: int) -> None:
        optimizer = warmup_optimizer(self.learner, cfg.learning_rate)
        samples = [self.demo_sample(t) for t in tasks]
        rng = random.Random(seed)
        for _ in range(cfg.epochs):
            rng.shuffle(samples)
            for i in range(0, len(samples), cfg.batch_size):
                self.learner.supervised_step(samples[i : i + cfg.batch_size], optimizer)

    async def grpo_step(self, tasks: list[dict[str, Any]], step: int) -> float:
        """One GRPO step on the tasks (groupSize episodes each); returns its success rate."""
        groups = []
        for t in tasks:
            played = await asyncio.gather(
                *(self.play(t, self.algo.temperature) for _ in range(self.algo.group_size))
            )
            group = Group(t["id"], f"s{step}-{t['id']}")
            for e, (reward, sample, _) in enumerate(played):
                result = EpisodeResult(t["id"], group.group_id, f"{group.group_id}-e{e}")
                result.score(reward)
                sample.task_id, sample.group_id = t["id"], group.group_id
                result.samples = [sample]
                group.episodes.append(result)
            groups.append(group)
        batch = assemble_batch(groups, self.algo, None)
        stats = batch.stats()
        print(
            f"    mean reward {stats['reward_mean']:.3f}, samples {stats['samples']:.0f}",
            flush=True,
        )
        if batch.samples:
            self.learner.step(batch.samples)
        return stats["success_rate"]


async def one_seed(args: argparse.Namespace, seed: int, lr: float) -> dict[str, Any]:
    torch.manual_seed(seed)
    train, heldout = load_split("train"), load_split("heldout")
    algo = AlgorithmConfig.model_validate(
        {
            "groupSize": args.group,
            "tasksPerStep": args.tasks,
            "maxTurns": 1,
            "learningRate": lr,
            "maxNewTokens": 16,
            "temperature": args.temperature,
            "entropyCoef": args.entropy_coef,
        }
    )
    off = Offline(args.model, Image.open(args.screenshot), algo, args.max_pixels)
    off.fuzzy, off.system = args.fuzzy, args.system or None
    off.eval_temperature, off.eval_episodes = args.eval_temperature, args.eval_episodes
    warm = WarmupConfig.model_validate(
        {
            "demonstrations": "-",
            "epochs": args.warmup_epochs,
            "batchSize": args.warmup_batch,
            "learningRate": args.warmup_lr,
        }
    )
    t0 = time.monotonic()
    untrained = await off.success(heldout)
    off.warm_up(warmup_tasks(), warm, seed)
    start = await off.success(heldout)
    print(
        f"seed {seed} lr {lr:g}: held-out untrained {untrained:.3f}, warmed {start:.3f}", flush=True
    )
    rng, per_step = random.Random(seed), []
    for step in range(args.steps):
        per_step.append(await off.grpo_step(rng.sample(train, args.tasks), step))
        print(f"  step {step + 1}: train success {per_step[-1]:.3f}", flush=True)
    end = await off.success(heldout)
    await off.engine.close()
    return {
        "seed": seed,
        "learning_rate": lr,
        "heldout_untrained": untrained,
        "heldout_start": start,
        "heldout_end": end,
        "train_success_per_step": [round(x, 3) for x in per_step],
        "seconds": round(time.monotonic() - t0, 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("screenshot")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tasks", type=int, default=8, help="train instances per GRPO step")
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--warmup-lr", type=float, default=3e-3)
    p.add_argument("--warmup-epochs", type=int, default=10)
    p.add_argument("--warmup-batch", type=int, default=2)
    p.add_argument("--max-pixels", type=int, default=12544)
    p.add_argument("--system", default=BENCH_PROMPT, help="system prompt ('': the agent's own)")
    p.add_argument("--entropy-coef", type=float, default=0.0)
    p.add_argument("--eval-temperature", type=float, default=0.0)
    p.add_argument("--eval-episodes", type=int, default=1, help="per task when sampled")
    p.add_argument("--fuzzy", action="store_true", help="train on desktop-env fuzzy_match rewards")
    p.add_argument("--control", action="store_true", help="also run seed 0 at learning rate 1e-30")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    runs = [asyncio.run(one_seed(args, s, args.lr)) for s in args.seeds]
    if args.control:
        runs.append(asyncio.run(one_seed(args, args.seeds[0], 1e-30)))
    for r in runs:
        print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
