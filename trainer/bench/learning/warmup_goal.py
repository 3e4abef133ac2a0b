"""What spec.warmup.goal's measure reads on a family, offline: the share of demonstrated replies the
greedy policy reproduces (warmup/goal.py) after each chunk of a warm-up, beside greedy held-out
success and how often greedy presses the right first key on the held-out screens (does it read
the colours? offline.py's first_keys), for a few seeds. It calibrates goal.replyMatchMin
(api/kubecua_api/warmup.py): a warm-up that never learnt to read the screen should read below
it, one that reads it above.
The warm-up is bench/learning/offline.py's (the demonstrator's replies on drawn screens,
Learner.supervised_step as spec.warmup does); prints one JSON line per measurement.

    .venv/bin/python -m bench.learning.warmup_goal MODEL_DIR \\
        --family ../sandbox-image/tasks/colourkeys-demo --lr 1e-3 --epochs 90 --every 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import torch

from bench.learning.family import load
from bench.learning.offline import Offline, Warmup
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.warmup.goal import replies_reproduced


async def one_seed(args: argparse.Namespace, seed: int) -> None:
    torch.manual_seed(seed)
    fam = load(args.family)
    algo = AlgorithmConfig.model_validate(
        {"groupSize": 8, "tasksPerStep": 4, "maxTurns": fam.max_turns, "maxNewTokens": 16}
    )
    off = Offline(args.model, fam, algo)
    heldout = fam.split("heldout")
    warm = Warmup(off, fam.warmup_tasks(), args.lr, 2, seed)
    t0 = time.monotonic()
    while warm.epochs < args.epochs:
        warm.run(args.every)
        matched = replies = 0
        t1 = time.monotonic()
        for demo in warm.demos:
            for sample in demo:
                m, n = replies_reproduced(off.policy, sample)
                matched, replies = matched + m, replies + n
        measure_seconds = time.monotonic() - t1
        rows = await off.success(heldout)
        keys = await off.first_keys(heldout, n=1)  # does greedy read the first square's colour?
        tasks = sum(k["tasks"] for k in keys.values())
        first_key = sum(k["greedy_right"] * k["tasks"] for k in keys.values()) / tasks
        row = {
            "seed": seed,
            "epochs": warm.epochs,
            "reply_match": round(matched / max(1, replies), 4),
            "replies": replies,
            "heldout_greedy": round(sum(r[0] for r in rows) / len(rows), 4),
            "heldout_first_key_right": round(first_key, 4),
            "measure_seconds": round(measure_seconds, 2),  # every demonstration, one thread
            "seconds": round(time.monotonic() - t0, 1),
        }
        print(json.dumps(row), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--family", required=True)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--every", type=int, default=30)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    for seed in args.seeds:
        asyncio.run(one_seed(args, seed))


if __name__ == "__main__":
    main()
