"""The colourkeys family needs the screen: a policy warmed up on its demonstrations succeeds on
training instances it was not shown as demonstrations when it sees their screens, and falls to
chance when every screen is blank (the squares gone), everything else the same.

Set-up (offline, the trainer's own pieces: bench/learning/offline.py): the benchmark model
(built from a config, random weights) warmed up for EPOCHS epochs on the family's 30
demonstrations (drawn screens, as each instance's window draws them), then played greedily on
the first 30 other training instances, once with their screens and once with blank ones.
Why the bounds are defensible on a loaded machine: greedy play is a deterministic function of
the weights, so load makes it slower, not noisier. With every screen blank the instruction and
turn lines are the same for every instance, so the policy types one fixed sequence whatever the
instance: it can match at most the instances that have that sequence, one of the 30 here
(sequences are distinct), i.e. chance. With the screens, the offline calibration (seed 2, 30
epochs, 2026-11-27, docs/benchmarks.md) reached greedy pass@1 0.62 on 16 training instances.
About 1 to 3 minutes (the warm-up on the CPU)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import torch

from bench.learning import family, run
from bench.learning.offline import Offline, Warmup
from kubecua_trainer.config import AlgorithmConfig

CACHE = Path(os.environ.get("KUBECUA_CACHE", Path.home() / ".cache" / "kubecua"))
SEED, EPOCHS = 2, 30
MIN_WITH_SCREEN = 6  # of 30: 20%, a third of the calibration's 0.62


def test_warmed_policy_needs_the_screen() -> None:
    torch.manual_seed(SEED)
    fam = family.load(family.TASKS / "colourkeys")
    (CACHE / "models").mkdir(parents=True, exist_ok=True)
    model = run.bench_model(CACHE, fam)
    algo = AlgorithmConfig.model_validate(
        {"maxTurns": fam.max_turns, "maxNewTokens": 16, "groupSize": 2, "tasksPerStep": 1}
    )
    off = Offline(str(model), fam, algo)
    demos = fam.warmup_tasks()
    Warmup(off, demos, 1e-3, 2, SEED).run(EPOCHS)
    shown = {t["id"] for t in demos}
    others = [t for t in fam.split("train") if t["id"] not in shown][:30]
    try:
        seen = sum(r[0] for r in asyncio.run(off.success(others)))
        off.blank = True
        blank = sum(r[0] for r in asyncio.run(off.success(others)))
    finally:
        asyncio.run(off.engine.close())
    assert seen >= MIN_WITH_SCREEN, (seen, blank)
    assert blank <= 1, (seen, blank)
