"""Offline calibration of the learning benchmark: the trainer's own pieces without desktops.

What it does: for each seed, warms the benchmark model up on the family's demonstration
instances (the demonstrator's replies: the references, or a family's biased demonstrator as
family.json warmupSolution names; Learner.supervised_step as spec.warmup does) in chunks of
--check-every epochs, measuring after each chunk greedy pass@1 and pass@k at temperature 1 on
training instances (the stopping rule of spec.warmup.stopWhen) until the rule holds or
overshoots (--warm-dir keeps that warm-up per seed and later runs start from it); then from
the same warmed weights runs the benchmark's arms: GRPO steps on the training instances
(HFEngine sampling, tokens.Conversation samples, batch.assemble_batch, Learner.step), and
continued supervised training on the same demonstrations for the same wall time (at most
--sft-max-seconds); and measures greedy held-out success untrained, at the start and after each
arm, each held-out instance's outcome (for the paired test), and per colour of the first screen
how often the greedy and the sampled reply press the right key (Offline.first_keys). Episodes
are played against drawn screens (family.Family.screen: what the instance's window draws) or,
for a family without them, one fixed screenshot; the reward is read from the replies
(family.offline_reward: would these actions type exactly the expected text? with
--partial-weight, plus that weight times the fuzzy_match ratio, as spec.reward's partial term).
A run takes tens of minutes on one thread (docs/benchmarks.md has the figures), which is what
choosing learning rates and steps needs.
What it leaves out: the desktops (`make bench-learning` runs the real pipeline).
How to run (from trainer/): .venv/bin/python -m bench.learning.offline MODEL_DIR
[--family ../sandbox-image/tasks/colourkeys] [--screenshot SHOT.png] [--seeds 0 1 2]
[--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import torch
from PIL import Image

from bench.learning.family import (
    BENCH_PROMPT,
    Family,
    expected_text,
    load,
    offline_reward,
    reference_replies,
    typed_text,
)
from kubecua_api.warmup import WarmupGoalConfig
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import Generation, SamplingParams, seeded
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.batch import assemble_batch
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    next_user_text,
    parse_action,
    system_prompt,
)
from kubecua_trainer.rollout.context import CONTEXTS, EpisodeContext
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult
from kubecua_trainer.tokens import Sample, fit_image
from kubecua_trainer.warmup.goal import goal_indices, replies_reproduced
from kubecua_trainer.warmup.schedule import Schedule, rate_factor, set_rate
from kubecua_trainer.warmup.sft import warmup_optimizer


class Offline:
    """One policy, its engine and learner, and the family whose screens the prompts show."""

    def __init__(
        self,
        model: str,
        fam: Family,
        algo: AlgorithmConfig,
        screenshot: Image.Image | None = None,
        system: str | None = BENCH_PROMPT,
        pixels: int | None = None,
        device: str = "cpu",
    ):
        self.policy: Policy = load_policy(model, dtype="float32", device=device)
        self.engine = HFEngine(self.policy)
        self.learner = Learner(self.policy, algo)
        self.fam, self.algo = fam, algo
        self.pixels = pixels or fam.max_pixels
        self.system = system  # None: the agent's whole prompt
        self.fixed = fit_image(screenshot, self.policy, self.pixels) if screenshot else None
        self.partial_weight = 0.0
        self.seed: int | None = None  # keys every sampled draw (play); None: the generator's
        self.checks_made = 0
        self.keep_screenshots = 1
        self.blank = False
        self._screens: dict[str, Image.Image] = {}

    def image(self, task: dict[str, Any], typed: int = 0) -> Image.Image:
        if self.blank:  # the ablation: the screen with every square gone, whatever the task
            typed = len(expected_text(task))
        key = f"{task['id']}/{typed}"
        if key not in self._screens:
            drawn = self.fam.screen(task, typed)
            if drawn is None and self.fixed is None:
                raise ValueError(f"{self.fam.name} draws no screens: pass --screenshot")
            fitted = None if drawn is None else fit_image(drawn, self.policy, self.pixels)
            self._screens[key] = fitted or self.fixed  # type: ignore[assignment]
        return self._screens[key]

    def context(self, task: dict[str, Any]) -> EpisodeContext:
        """The rollout's own context for algorithm.mode (trajectory or perTurn)."""
        img = self.image(task)  # every screen of a family has the same size
        return CONTEXTS[self.algo.mode](
            self.policy,
            system_prompt(*img.size, self.system),
            self.pixels,
            keep_screenshots=self.keep_screenshots,
            turn_discount=self.algo.turn_discount,
        )

    def demo_samples(self, task: dict[str, Any], done: bool = True) -> list[Sample]:
        """The demonstrator's replies (the reference's unless the family has a biased
        demonstrator; and DONE, as the recorder plays it, unless `done` is False)
        as trained samples, as the warm-up builds a demonstration, each turn with the screen
        the window shows then."""
        ctx, typed = self.context(task), 0
        im_end = self.policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
        replies = reference_replies(task, "demonstration")
        for t, reply in enumerate([*replies, *(["DONE"] if done else [])]):
            text = first_user_text(task["instruction"]) if t == 0 else next_user_text(t + 1)
            ctx.add_user(text, self.image(task, typed))
            ctx.prompt()
            typed += len(typed_text(reply) or "")
            ids = self.policy.tokenizer(reply, add_special_tokens=False)["input_ids"]
            ids = [*ids, im_end]
            ctx.add_generation(Generation(list(ids), [0.0] * len(ids), "stop"), reply)
        return ctx.samples(1.0)

    async def play(
        self, task: dict[str, Any], temperature: float, key: tuple[object, ...] = ()
    ) -> tuple[float, float, list[Sample]]:
        """(exact reward, shaped reward, samples) of one episode of maxTurns turns. key: with
        self.seed, each turn draws from (seed, key, turn) (SamplingParams.seed), as the trainer's
        episodes do, so the episode repeats whatever shares its batch."""
        ctx, typed = self.context(task), 0
        stop = int(self.policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        sampling = SamplingParams(temperature, 1.0, self.algo.max_new_tokens, (stop,))
        replies: list[str] = []
        user: tuple[str, Image.Image | None] = (
            first_user_text(task["instruction"]),
            self.image(task),
        )
        for t in range(self.algo.max_turns):
            ctx.add_user(*user)
            ids, images = ctx.prompt()
            gen = await self.engine.generate(ids, images, seeded(sampling, self.seed, *key, t))
            reply = self.policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            ctx.add_generation(gen, reply)
            replies.append(reply)
            try:
                action = parse_action(reply)
            except ParseError as err:
                user = (err.feedback, None)
                continue
            if action.kind in ("DONE", "FAIL"):
                break
            typed += len(typed_text(reply) or "")
            user = (next_user_text(t + 2), self.image(task, typed))
        exact = offline_reward(task, replies)
        shaped = exact
        if self.partial_weight:
            shaped += self.partial_weight * offline_reward(task, replies, fuzzy=True)
        return exact, shaped, ctx.samples(shaped)

    async def success(
        self,
        tasks: list[dict[str, Any]],
        temperature: float = 0.0,
        n: int = 1,
        key: tuple[object, ...] = (),
    ) -> list[list[float]]:
        """Each task's exact rewards over n episodes at `temperature` (episode j of a task
        keyed by (key, task id, j))."""
        results = await asyncio.gather(
            *(self.play(t, temperature, (*key, t["id"], j)) for t in tasks for j in range(n))
        )
        return [[r[0] for r in results[i * n : (i + 1) * n]] for i in range(len(tasks))]

    async def first_keys(self, tasks: list[dict[str, Any]], n: int = 8) -> dict[str, Any]:
        """Per colour of the leftmost square on the first screen (by its right key): how often
        the greedy reply presses the right key, and how often n replies at temperature 1 do,
        with the keys greedy pressed instead. Shows a biased demonstrator's mark: greedy wrong
        on a confused colour while sampling still finds the right key."""
        stop = int(self.policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        rows: dict[str, dict[str, Any]] = {}

        async def first(task: dict[str, Any], temperature: float, j: int = 0) -> str:
            key = ("first", task["id"])
            ctx = self.context(task)
            ctx.add_user(first_user_text(task["instruction"]), self.image(task))
            ids, images = ctx.prompt()
            sampling = SamplingParams(temperature, 1.0, self.algo.max_new_tokens, (stop,))
            gen = await self.engine.generate(ids, images, seeded(sampling, self.seed, *key, j))
            reply = self.policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            return (typed_text(reply) or "?")[:1]

        for task in tasks:
            want = expected_text(task)[0]
            greedy, *sampled = await asyncio.gather(
                first(task, 0.0), *(first(task, 1.0, j) for j in range(n))
            )
            row = rows.setdefault(want, {"tasks": 0, "greedy": 0, "sampled": 0, "instead": {}})
            row["tasks"] += 1
            row["greedy"] += greedy == want
            row["sampled"] += sum(k == want for k in sampled)
            if greedy != want:
                row["instead"][greedy] = row["instead"].get(greedy, 0) + 1
        return {
            k: {"greedy_right": round(r["greedy"] / r["tasks"], 3),
                "sampled_right": round(r["sampled"] / (r["tasks"] * n), 3),
                "greedy_instead": r["instead"], "tasks": r["tasks"]}
            for k, r in sorted(rows.items())
        }  # fmt: skip

    async def stop_rule(self, tasks: list[dict[str, Any]], k: int) -> tuple[float, float]:
        """(greedy pass@1, pass@k at temperature 1) over the tasks."""
        greedy = await self.success(tasks)
        self.checks_made += 1
        sampled = await self.success(tasks, 1.0, k, ("check", self.checks_made))
        return (sum(g[0] for g in greedy) / len(tasks),
                sum(max(s) for s in sampled) / len(tasks))  # fmt: skip

    async def grpo_step(self, tasks: list[dict[str, Any]], step: int) -> float:
        """One GRPO step on the tasks (groupSize episodes each); returns its success rate."""
        groups = []
        for t in tasks:
            played = await asyncio.gather(
                *(
                    self.play(t, self.algo.temperature, ("grpo", step, t["id"], e))
                    for e in range(self.algo.group_size)
                )
            )
            group = Group(t["id"], f"s{step}-{t['id']}")
            for e, (_, shaped, samples) in enumerate(played):
                result = EpisodeResult(t["id"], group.group_id, f"{group.group_id}-e{e}")
                result.score(shaped)
                for sample in samples:
                    sample.task_id, sample.group_id = t["id"], group.group_id
                result.samples = samples
                group.episodes.append(result)
            groups.append(group)
        batch = assemble_batch(groups, self.algo, None)
        if batch.samples:
            self.learner.step(batch.samples)
        exact = [r for g in groups for r in (e.reward for e in g.episodes)]
        return sum(1 for r in exact if r is not None and r >= 1.0) / max(1, len(exact))


class Warmup:
    """spec.warmup's fit, resumable chunk by chunk (the optimizer and shuffle carry over)."""

    def __init__(
        self,
        off: Offline,
        tasks: list[dict[str, Any]],
        lr: float,
        batch: int,
        seed: int,
        schedule: Schedule = "constant",
        planned_epochs: int = 0,
        ramp: float = 0.0,
        floor: float = 0.0,
    ):
        self.off, self.batch, self.lr = off, batch, lr
        self.optimizer = warmup_optimizer(off.learner, lr)
        self.demos = [off.demo_samples(t) for t in tasks]  # a batch is batchSize demos
        self.in_order = list(self.demos)  # the file order goal_indices draws from
        self.rng = random.Random(seed)
        self.epochs = self.steps = 0
        per_epoch = -(-len(self.demos) // batch)
        self.factor = lambda step: rate_factor(step, planned_epochs * per_epoch, schedule,
                                               ramp, floor)  # fmt: skip

    def run(self, epochs: int) -> None:
        for _ in range(epochs):
            self.rng.shuffle(self.demos)
            for i in range(0, len(self.demos), self.batch):
                batch = [s for d in self.demos[i : i + self.batch] for s in d]
                set_rate(self.optimizer, self.lr, self.factor(self.steps))
                self.off.learner.supervised_step(batch, self.optimizer)
                self.steps += 1
            self.epochs += 1

    def goal(self, goal: WarmupGoalConfig, seed: int) -> dict[str, Any]:
        """spec.warmup.goal's measure (warmup/goal.py) on the demonstrations a run would draw."""
        matched = replies = 0
        for i in goal_indices(len(self.in_order), goal, seed):
            for sample in self.in_order[i]:
                m, n = replies_reproduced(self.off.policy, sample)
                matched, replies = matched + m, replies + n
        match = matched / max(1, replies)
        return {"epochs": self.epochs, "reply_match": round(match, 4),
                "met": replies > 0 and match >= goal.reply_match_min - 1e-12}  # fmt: skip


def stop_here(check: dict[str, Any], args: argparse.Namespace) -> bool:
    """spec.warmup.stopWhen's rule: greedy pass@1 in the window and pass@k above its floor,
    or greedy pass@1 above the window (overshot)."""
    p1, pk = check["pass1"], check[f"pass{args.k}"]
    return bool((p1 >= args.pass1_min and pk >= args.passk_min) or p1 > args.pass1_max)


class Fits(Protocol):
    epochs: int

    def run(self, epochs: int) -> None: ...


async def fit_in_chunks(
    warm: Fits,
    checks: list[dict[str, Any]],
    max_epochs: int,
    every: int,
    check: Callable[[int], Awaitable[dict[str, Any]]],
    stop: Callable[[dict[str, Any]], bool],
) -> None:
    """The warm-up as the trainer's stage (kubecua_trainer/warmup/stage.py) runs it: chunks of
    `every` epochs, the last cut to `max_epochs`, a check after each but the last (the warm-up
    ends there whatever a check would say), stopping at the first check that says so. `checks`
    may hold a loaded warm-up's: one that said stop trains nothing more."""
    while warm.epochs < max_epochs and not (checks and stop(checks[-1])):
        warm.run(min(every, max_epochs - warm.epochs))
        if warm.epochs < max_epochs:
            checks.append(await check(warm.epochs))


def rate(rows: list[list[float]]) -> float:
    return round(sum(r[0] for r in rows) / len(rows), 4)


async def one_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    fam = load(args.family)
    train, heldout = fam.split("train"), fam.split("heldout")
    algo = AlgorithmConfig.model_validate(
        {
            "groupSize": args.group,
            "tasksPerStep": args.tasks,
            "maxTurns": fam.max_turns,
            "learningRate": args.lr,
            "maxNewTokens": 16,
            "temperature": 1.0,
            "mode": args.mode,
            "turnDiscount": args.turn_discount,
            "miniBatches": args.mini_batches,
        }
    )
    shot = Image.open(args.screenshot) if args.screenshot else None
    off = Offline(args.model, fam, algo, shot, args.system or None, device=args.device)
    off.partial_weight = args.partial_weight
    off.seed = seed
    untrained = None if args.no_untrained else rate(await off.success(heldout))
    demos = fam.warmup_tasks()[: args.demos or None]
    warm = Warmup(off, demos, args.warmup_lr, args.warmup_batch, seed, args.warmup_schedule,
                  args.max_epochs, args.warmup_ramp, args.warmup_floor)  # fmt: skip
    probe = random.Random(seed).sample(train, min(args.probe, len(train)))
    checks: list[dict[str, Any]] = []
    t0 = time.monotonic()
    warm_file = args.warm_dir and f"{args.warm_dir}/warm-seed{seed}.pt"
    loaded_goal: list[dict[str, Any]] | None = None
    if warm_file and os.path.exists(warm_file):  # the same seed's warm-up, run before
        saved = torch.load(warm_file, weights_only=False)
        off.policy.model.load_state_dict(saved["model"])
        warm.optimizer.load_state_dict(saved["optimizer"])
        warm.rng.setstate(saved["rng"])
        warm.epochs, checks = saved["epochs"], saved["checks"]
        warm.steps = saved.get("steps", 0)
        loaded_goal = saved.get("goal_checks")  # its goal was measured (and extended) then
        if "torch_rng" in saved:  # GRPO then samples as after a warm-up run here
            torch.set_rng_state(saved["torch_rng"])

    async def check(epochs: int) -> dict[str, Any]:
        p1, pk = await off.stop_rule(probe, args.k)
        print(f"seed {seed}: warm-up {epochs} epochs: pass@1 {p1:.2f} pass@{args.k} {pk:.2f}")
        return {"epochs": epochs, "pass1": p1, f"pass{args.k}": pk}

    await fit_in_chunks(warm, checks, args.max_epochs, args.check_every, check,
                        lambda c: stop_here(c, args))  # fmt: skip
    goal_checks = loaded_goal or []
    # spec.warmup.goal with onBelowGoal extend (0 extension epochs: fail)
    if args.goal_min > 0 and loaded_goal is None:
        goal = WarmupGoalConfig(replyMatchMin=args.goal_min)
        goal_checks.append(warm.goal(goal, seed))
        if not goal_checks[-1]["met"] and args.goal_extend > 0:
            warm.run(args.goal_extend)
            goal_checks.append(warm.goal(goal, seed))
        print(f"seed {seed}: warm-up goal {json.dumps(goal_checks)}", flush=True)
    warm_seconds = time.monotonic() - t0
    if warm_file and not os.path.exists(warm_file):
        state = {"model": off.policy.model.state_dict(), "optimizer": warm.optimizer.state_dict(),
                 "rng": warm.rng.getstate(), "epochs": warm.epochs, "checks": checks,
                 "steps": warm.steps, "goal_checks": goal_checks,
                 "torch_rng": torch.get_rng_state()}  # fmt: skip
        os.makedirs(os.path.dirname(warm_file), exist_ok=True)
        torch.save(state, warm_file)
    start_rows = [r[0] for r in await off.success(heldout)]
    start = round(sum(start_rows) / len(start_rows), 4)
    keys = {"start": await off.first_keys(heldout)}
    warmed = copy.deepcopy(off.policy.model.state_dict())
    print(f"seed {seed}: held-out untrained {untrained}, warmed {start}", flush=True)
    print(f"  first keys: {json.dumps(keys['start'])}", flush=True)
    rng, per_step = random.Random(seed), []
    t0 = time.monotonic()
    for step in range(args.steps):
        per_step.append(await off.grpo_step(rng.sample(train, args.tasks), step))
        print(f"  step {step + 1}: train success {per_step[-1]:.3f}"
              f" ({time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
    grpo_seconds = time.monotonic() - t0
    grpo_rows = await off.success(heldout)
    keys["grpo"] = await off.first_keys(heldout)
    print(f"seed {seed}: held-out after GRPO {rate(grpo_rows)}", flush=True)
    print(f"  first keys: {json.dumps(keys['grpo'])}", flush=True)
    print("grpo-outcomes " + json.dumps({"seed": seed, "start": start_rows,
          "grpo": [r[0] for r in grpo_rows]}), flush=True)  # fmt: skip
    sft_seconds = min(grpo_seconds, args.sft_max_seconds or grpo_seconds)
    off.policy.model.load_state_dict(warmed)
    t0, sft_epochs = time.monotonic(), 0
    while time.monotonic() - t0 < sft_seconds:
        warm.run(1)
        sft_epochs += 1
    sft_spent = time.monotonic() - t0
    sft_rows = await off.success(heldout)
    keys["sft"] = await off.first_keys(heldout)
    await off.engine.close()
    return {
        "seed": seed,
        "heldout_untrained": untrained,
        "warmup_checks": checks,
        "warmup_epochs": warm.epochs,  # an extension (spec.warmup.goal) included
        # spec.warmup.goal's measurements; a last one not met is a run that fails before GRPO
        # (its arms still run here, to show what the goal caught)
        "warmup_goal": goal_checks,
        "warmup_seconds": round(warm_seconds, 1),
        "heldout_start": start,
        "heldout_grpo": rate(grpo_rows),
        "heldout_sft": rate(sft_rows),
        # per held-out instance (sorted by id) 1/0: McNemar pairs them across arms and seeds
        "heldout_outcomes": {
            "start": start_rows,
            "grpo": [r[0] for r in grpo_rows],
            "sft": [r[0] for r in sft_rows],
        },
        "first_keys": keys,
        "sft_epochs": sft_epochs,
        "sft_seconds": round(sft_spent, 1),
        "train_success_per_step": [round(x, 3) for x in per_step],
        "grpo_seconds": round(grpo_seconds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--family", default=None, help="a family folder (default colourkeys-quits)")
    p.add_argument("--screenshot", help="the one screen of a family that draws none")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tasks", type=int, default=8, help="train instances per GRPO step")
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--partial-weight", type=float, default=0.0)
    p.add_argument("--warmup-lr", type=float, default=3e-3)
    p.add_argument("--warmup-batch", type=int, default=2)
    p.add_argument("--warmup-schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--warmup-ramp", type=float, default=0.0, help="share of steps rising")
    p.add_argument("--warmup-floor", type=float, default=0.1, help="cosine: last rate / peak")
    p.add_argument("--goal-min", type=float, default=0.0,
                   help="spec.warmup.goal.replyMatchMin (0: no goal measured)")  # fmt: skip
    p.add_argument("--goal-extend", type=int, default=30, help="epochs added once below goal")
    p.add_argument("--check-every", type=int, default=5, help="warm-up epochs between checks")
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--probe", type=int, default=16, help="training instances the rule measures")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--pass1-min", type=float, default=0.2)
    p.add_argument("--pass1-max", type=float, default=1.0, help="above it: overshot, stop")
    p.add_argument("--passk-min", type=float, default=0.7)
    p.add_argument("--system", default=BENCH_PROMPT, help="system prompt ('': the agent's own)")
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", default="perTurn", choices=["trajectory", "perTurn"])
    p.add_argument("--turn-discount", type=float, default=1.0)
    p.add_argument("--mini-batches", type=int, default=1, help="optimizer steps per GRPO step")
    p.add_argument("--demos", type=int, default=0, help="only the first N demonstrations")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-untrained", action="store_true", help="skip the untrained evaluation")
    p.add_argument("--warm-dir", help="keep each seed's warm-up here and start from it when there")
    p.add_argument("--sft-max-seconds", type=float, default=0.0,
                   help="cap the continued-SFT arm (default: GRPO's wall time)")  # fmt: skip
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = [asyncio.run(one_seed(args, s)) for s in args.seeds]
    for r in runs:
        print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
