"""`make bench-curriculum`: the curriculum by pass rate against uniform sampling, one command.

What it does: on the offline suite (bench/learning/offline.py: the trainer's engine, samples,
batch and learner against a family's drawn screens, rewards read from the replies; no desktops),
for each seed: warms the benchmark model up for a fixed number of epochs on the family's
demonstration instances, so the training instances range from never to always solved (a
mixed-difficulty set as the policy sees it), measures greedy held-out success, then from those
same weights runs two arms of GRPO steps with a fresh optimizer each:
- uniform: a step's tasks drawn as the trainer does without a curriculum (groups.tasks_for_step);
- curriculum: drawn by rollout/curriculum.py with spec.tasks.curriculum's defaults (or --band,
  --floor, --window), fed each step's scored outcomes as the loop feeds it.
Per arm: the fraction of zero-variance groups (every episode of the group with the same reward:
no advantage, nothing learned), the training success per step, the pass-rate distribution at the
end (curriculum arm), and greedy held-out success after the steps.
What it leaves out: desktops, and statistical power: a few seeds of a small model; read the
figures with their seeds.
How to run (from trainer/): `.venv/bin/python -m bench.learning.curriculum_ab --model DIR
[--family ../sandbox-image/tasks/colourkeys] [--seeds 0 1] [--steps 10] [--json out.json]`;
without --model it builds the benchmark model for the family (tiny_models, size bench) in a
temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.learning.family import BENCH_PROMPT, TASKS, load
from bench.learning.offline import Offline, Warmup, rate
from kubecua_api.curriculum import CurriculumConfig
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.batch import assemble_batch
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.rollout.curriculum import Curriculum, scored_results
from kubecua_trainer.rollout.groups import Group, tasks_for_step
from kubecua_trainer.rollout.records import EpisodeResult


async def play_step(off: Offline, tasks: list[dict[str, Any]], step: int) -> list[Group]:
    """One GRPO step on the tasks (groupSize episodes each): the groups, after the update."""
    groups: list[Group] = []
    for t in tasks:
        played = await asyncio.gather(
            *(off.play(t, off.algo.temperature) for _ in range(off.algo.group_size))
        )
        group = Group(t["id"], f"s{step}-{t['id']}-{len(groups)}")
        for e, (exact, shaped, samples) in enumerate(played):
            result = EpisodeResult(t["id"], group.group_id, f"{group.group_id}-e{e}")
            result.score(shaped)
            result.outcome = "success" if exact >= 1.0 else "failure"
            samples = samples if isinstance(samples, list) else [samples]
            for sample in samples:
                sample.task_id, sample.group_id = t["id"], group.group_id
            result.samples = samples
            group.episodes.append(result)
        groups.append(group)
    batch = assemble_batch(groups, off.algo, None)
    if batch.samples:
        off.learner.step(batch.samples)
    return groups


def zero_variance(groups: list[Group]) -> int:
    return sum(1 for g in groups if len({e.reward for e in g.scored}) <= 1)


async def arm(
    off: Offline, name: str, args: argparse.Namespace, seed: int, cfg: CurriculumConfig
) -> dict[str, Any]:
    train, heldout = off.fam.split("train"), off.fam.split("heldout")
    off.learner = Learner(off.policy, off.algo)  # a fresh AdamW per arm
    cur = Curriculum(cfg, [t["id"] for t in train]) if name == "curriculum" else None
    zero, total, success = 0, 0, []
    t0 = time.monotonic()
    for step in range(1, args.steps + 1):
        if cur is not None:
            tasks = cur.draw(train, step, args.tasks, seed)
        else:
            tasks = tasks_for_step(train, step, args.tasks, seed)
        groups = await play_step(off, tasks, step)
        if cur is not None:
            cur.observe(step, scored_results(groups))
        zero += zero_variance(groups)
        total += len(groups)
        episodes = [e for g in groups for e in g.scored]
        success.append(round(sum(e.outcome == "success" for e in episodes) / len(episodes), 3))
        zeros = f"{zero_variance(groups)}/{len(groups)}"
        print(f"seed {seed} {name} step {step}: zero-variance {zeros}, success {success[-1]}")
    out: dict[str, Any] = {
        "zero_variance_groups": zero,
        "groups": total,
        "zero_variance_fraction": round(zero / total, 3),
        "train_success_per_step": success,
        "heldout": rate(await off.success(heldout)),
        "seconds": round(time.monotonic() - t0, 1),
    }
    if cur is not None:
        cur.draw(train, args.steps + 1, 1, seed)  # applies the last step's outcomes
        out["pass_rates"] = cur.summary()
    return out


async def one_seed(args: argparse.Namespace, seed: int, model: str) -> dict[str, Any]:
    torch.manual_seed(seed)
    fam = load(args.family)
    algo = AlgorithmConfig.model_validate(
        {
            "groupSize": args.group,
            "tasksPerStep": args.tasks,
            "maxTurns": fam.max_turns,
            "learningRate": args.lr,
            "maxNewTokens": 16,
            "temperature": 1.0,
        }
    )
    off = Offline(model, fam, algo, None, BENCH_PROMPT, device=args.device)
    warm = Warmup(off, fam.warmup_tasks(), args.warmup_lr, args.warmup_batch, seed)
    warm.run(args.warmup_epochs)
    start = rate(await off.success(fam.split("heldout")))
    print(f"seed {seed}: warm-up {args.warmup_epochs} epochs, held-out {start}", flush=True)
    warmed = copy.deepcopy(off.policy.model.state_dict())
    cfg = CurriculumConfig.model_validate(
        {
            "band": {"low": args.band[0], "high": args.band[1]},
            "floor": args.floor,
            "window": args.window,
        }
    )
    arms = {}
    for name in ("uniform", "curriculum"):
        off.policy.model.load_state_dict(warmed)
        torch.manual_seed(seed * 1000 + 1)  # the same sampling noise for both arms
        arms[name] = await arm(off, name, args, seed, cfg)
    await off.engine.close()
    return {"seed": seed, "heldout_start": start, "arms": arms}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="the benchmark model (default: built for the family)")
    # colourkeys, where its figures in docs/benchmarks.md were measured (bench-learning's
    # default moved to colourkeys-quits)
    p.add_argument("--family", default=str(TASKS / "colourkeys"), help="a family folder")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--tasks", type=int, default=6, help="tasks per GRPO step")
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup-epochs", type=int, default=10)
    p.add_argument("--warmup-lr", type=float, default=3e-3)
    p.add_argument("--warmup-batch", type=int, default=2)
    p.add_argument("--band", type=float, nargs=2, default=(0.1, 0.9))
    p.add_argument("--floor", type=float, default=0.1)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = args.model
    if model is None:
        from kubecua_trainer import tiny_models

        model = str(Path(tempfile.mkdtemp(prefix="bench-model-")) / "model")
        tiny_models.build_tiny_model(Path(model), size="bench", corpus=load(args.family).corpus())
    runs = [asyncio.run(one_seed(args, s, model)) for s in args.seeds]
    doc = {"args": vars(args), "runs": runs, "mean": {
        name: {k: round(sum(r["arms"][name][k] for r in runs) / len(runs), 3)
               for k in ("zero_variance_fraction", "heldout")}
        for name in ("uniform", "curriculum")}}  # fmt: skip
    print(json.dumps(doc, indent=1), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
