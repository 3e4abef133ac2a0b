"""Desktop utilisation, synchronous vs rollout.maxStaleness 1, on local desktops (CPU machine).

Desktops are the scarce resource: with the synchronous loop they sit idle while the learner
steps; with staleness 1 the next step's episodes play meanwhile. This runs the same small
TrainingRun on the same two real local desktops (Xvfb + episode servers, real tasks and
evaluators), the tiny model on the CPU, once per mode after a one-step warm-up, and reports for
each the fraction of wall time the desktops were held by an episode:
    sum over episodes of sandbox_seconds / (wall seconds x desktops),
wall measured from the first rollout's start to the last update's end (the run's history).
Needs `make sandbox-env`. Run: `make bench-trainer-rollouts` (prints one JSON line).
With staleness 1 the embedded engine generates from its own copy of the weights (refreshed after
each update), so generation runs beside the update too. What it leaves out: the distributed
loop, and a GPU learner (here an update is short beside an episode, which bounds the gain).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from kubecua_trainer.config import API_VERSION, KIND, parse_training_run
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.local import REPO, LocalSource
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.testing.tiny_models import build_tiny_model
from kubecua_trainer.train import RunOptions, train

TASKS = REPO / "sandbox-image" / "tasks"


def spec(model: Path, urls: list[str], out: Path, staleness: int, steps: int) -> dict[str, Any]:
    return {
        "model": {"path": str(model), "dtype": "float32"},
        "sandboxes": {"urls": urls, "minReady": len(urls)},
        "tasks": {"path": str(TASKS), "ids": ["create-hello-file", "terminal-mkdir"]},
        "algorithm": {"groupSize": 2, "tasksPerStep": 1, "maxTurns": 3, "maxNewTokens": 16,
                      "dynamicSampling": False, "learningRate": 1e-4},
        "rollout": {"maxPixels": 448 * 448, "episodeTimeoutSeconds": 240,
                    "maxStaleness": staleness},
        "trainer": {"gradientCheckpointing": False},
        "checkpoint": {"everySteps": 1000},
        "metrics": {"port": 0},
        "steps": steps,
        "outputDir": str(out),
    }  # fmt: skip


async def one_mode(model: Path, source: LocalSource, out: Path, staleness: int, steps: int) -> dict:
    urls = [sb.url for sb in source.sandboxes]
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": f"s{staleness}"},
           "spec": spec(model, urls, out, staleness, steps)}  # fmt: skip
    result = await train(parse_training_run(obj), RunOptions(
        console=False, source=StaticSource(urls, source.token)))  # fmt: skip
    rows = result.history
    wall = rows[-1]["learn_ended_at"] - rows[0]["rollout_started_at"]
    busy = sum(r["sandbox_seconds"] for r in rows)
    learn = [r["learn_ended_at"] - r["learn_started_at"] for r in rows]
    return {
        "max_staleness": staleness,
        "steps": len(rows),
        "episodes": sum(int(r["episodes"]) for r in rows),
        "wall_seconds": round(wall, 2),
        "desktop_busy_seconds": round(busy, 2),
        "utilisation": round(busy / (wall * len(urls)), 3),
        "learn_seconds_mean": round(sum(learn) / len(learn), 2),
        "rollout_seconds_mean": round(sum(r["rollout_seconds"] for r in rows) / len(rows), 2),
        "staleness_max": max(r["staleness_max"] for r in rows),
    }


async def main_async(steps: int, work: Path) -> dict[str, Any]:
    model = build_tiny_model(work / "model", "qwen2_5_vl")
    source = LocalSource(2, work / "desktops", start_timeout=300)
    await source.start(SandboxLeases())
    try:
        await one_mode(model, source, work / "warm-up", 0, 1)  # first episodes pay cold starts
        runs = [await one_mode(model, source, work / f"out-{s}", s, steps) for s in (0, 1)]
    finally:
        await source.stop()
    sync, overlap = runs
    ratio = overlap["utilisation"] / sync["utilisation"]
    return {"machine": "CPU, 2 local desktops, tiny Qwen2.5-VL", "sync": sync,
            "staleness_1": overlap, "utilisation_ratio": round(ratio, 3)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollout-overlap-") as work:
        print(json.dumps(asyncio.run(main_async(args.steps, Path(work)))), flush=True)


if __name__ == "__main__":
    main()
