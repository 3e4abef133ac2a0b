"""Desktop utilisation, synchronous vs rollout.maxStaleness 1, on local desktops (CPU machine).

Desktops are the scarce resource: with the synchronous loop they sit idle while the learner
steps; with staleness 1 the next step's episodes play meanwhile. This runs the same small
TrainingRun on the same two real local desktops (Xvfb + episode servers, real tasks and
evaluators), the model on the CPU, once per mode after a one-step warm-up, and reports for
each the fraction of wall time the desktops were held by an episode:
    sum over episodes of sandbox_seconds / (wall seconds x desktops),
wall measured from the first rollout's start to the last update's end (the run's history).
Needs `make sandbox-env`. Run: `make bench-trainer-rollouts` (prints one JSON line).
With staleness 1 the embedded engine generates from its own copy of the weights (refreshed after
each update), so generation runs beside the update too.

Two regimes. The default trains the tiny test model, whose update (~0.5 s) is short beside a
step's episodes: the synchronous loop already keeps desktops busy most of the time, which bounds
the gain. `--learner-bound` stands for a real model on a GPU, whose update takes about as long as
a step's rollouts: the same run with a wider, deeper Qwen2.5-VL text model built from a config
(random weights, same code path, real learning) and torch pinned to one thread, so the learner
holds one of this machine's cores and leaves the other to the desktops and generation, as a GPU
learner leaves the desktops' CPUs alone. The JSON reports the measured update and rollout
seconds per step, so it shows which regime was measured. What it leaves out: the distributed
loop and a GPU; on this CPU generation also slows when the model grows (on a GPU, generation
would be a small part of an episode) and generation shares the cores with the update.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForImageTextToText, GenerationConfig

from kubecua_trainer.config import API_VERSION, KIND, parse_training_run
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.local import REPO, LocalSource
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.tiny_models import build_tiny_model

TASKS = REPO / "sandbox-image" / "tasks"
HEAD_DIM = 16  # the tiny model's head size: its mrope sections [4, 2, 2] cover 16 / 2 frequencies
# --learner-bound: ~32 M parameters, one thread: a CPU update of the step's two samples takes
# about as long as the step's two episodes (calibrated on the 2-core dev machine).
LEARNER_BOUND = {"hidden": 512, "layers": 8, "torch_threads": 1}


def scale_text_config(config: Any, hidden: int, layers: int) -> Any:
    """Widen/deepen the text model of a tiny Qwen2.5-VL config in place (heads of HEAD_DIM, half
    as many KV heads, MLP 4x hidden, the vision merger projecting to the new width)."""
    if hidden < 2 * HEAD_DIM or hidden % (2 * HEAD_DIM):
        raise ValueError(f"--hidden must be a positive multiple of {2 * HEAD_DIM}, got {hidden}")
    if layers < 1:
        raise ValueError(f"--layers must be at least 1, got {layers}")
    text = config.text_config
    text.hidden_size, text.intermediate_size = hidden, 4 * hidden
    text.num_hidden_layers = layers
    text.num_attention_heads, text.num_key_value_heads = hidden // HEAD_DIM, hidden // HEAD_DIM // 2
    if getattr(text, "layer_types", None) is not None:
        text.layer_types = [text.layer_types[0]] * layers
    config.vision_config.out_hidden_size = hidden
    return config


def build_model(out: Path, hidden: int | None, layers: int | None) -> tuple[Path, int]:
    """The tiny test model, or (hidden/layers given) the same with a scaled text model; the
    directory and the parameter count."""
    path = build_tiny_model(out, "qwen2_5_vl")
    if hidden is not None or layers is not None:
        config = AutoConfig.from_pretrained(path)
        scale_text_config(config, hidden or config.text_config.hidden_size,
                          layers or config.text_config.num_hidden_layers)  # fmt: skip
        generation = GenerationConfig.from_pretrained(path)
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        model.generation_config = generation
        model.save_pretrained(path)  # replaces the tiny weights; tokenizer and processor stay
    else:
        model = AutoModelForImageTextToText.from_pretrained(path)
    return path, sum(p.numel() for p in model.parameters())


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


def summarise(rows: list[dict[str, Any]], desktops: int, staleness: int) -> dict[str, Any]:
    """One mode's figures from the run's history rows (one per step)."""
    if not rows:
        raise ValueError("the run recorded no step")
    wall = rows[-1]["learn_ended_at"] - rows[0]["rollout_started_at"]
    busy = sum(r["sandbox_seconds"] for r in rows)
    episodes = sum(int(r["episodes"]) for r in rows)
    learn = [r["learn_ended_at"] - r["learn_started_at"] for r in rows]
    refresh = [r.get("weight_refresh_seconds", 0.0) for r in rows]

    def mean(xs: list[float]) -> float:
        return round(sum(xs) / len(xs), 2)

    return {
        "max_staleness": staleness,
        "steps": len(rows),
        "episodes": episodes,
        "wall_seconds": round(wall, 2),
        "desktop_busy_seconds": round(busy, 2),
        "utilisation": round(busy / (wall * desktops), 3),
        # utilisation counts a desktop as busy while its episode waits for generation; episodes
        # finished per minute shows whether the overlap also got more work done
        "episodes_per_minute": round(60 * episodes / wall, 2),
        "learn_seconds_mean": mean(learn),
        "rollout_seconds_mean": mean([r["rollout_seconds"] for r in rows]),
        "episode_seconds_mean": round(busy / max(episodes, 1), 2),
        "weight_refresh_seconds_mean": mean(refresh),
        "staleness_max": max(r["staleness_max"] for r in rows),
    }


async def one_mode(model: Path, source: LocalSource, out: Path, staleness: int, steps: int) -> dict:
    urls = [sb.url for sb in source.sandboxes]
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": f"s{staleness}"},
           "spec": spec(model, urls, out, staleness, steps)}  # fmt: skip
    result = await train(parse_training_run(obj), RunOptions(
        console=False, source=StaticSource(urls, source.token)))  # fmt: skip
    return summarise(result.history, len(urls), staleness)


async def main_async(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)  # global: the learner's and generation's threads
    model, params = build_model(work / "model", args.hidden, args.layers)
    source = LocalSource(2, work / "desktops", start_timeout=300)
    await source.start(SandboxLeases())
    try:
        await one_mode(model, source, work / "warm-up", 0, 1)  # first episodes pay cold starts
        runs = [await one_mode(model, source, work / f"out-{s}", s, args.steps) for s in (0, 1)]
    finally:
        await source.stop()
    sync, overlap = runs
    ratio = overlap["utilisation"] / sync["utilisation"]
    return {
        "machine": "CPU, 2 local desktops, Qwen2.5-VL from a config (random weights)",
        "regime": regime(args),
        "model_parameters": params,
        "torch_threads": torch.get_num_threads(),
        # sync: the update's share of a step; ~0.5 means the learner takes as long as rollouts
        "sync_learn_share": round(sync["learn_seconds_mean"]
                                  / (sync["learn_seconds_mean"] + sync["rollout_seconds_mean"]), 3),
        "sync": sync,
        "staleness_1": overlap,
        "utilisation_ratio": round(ratio, 3),
        "throughput_ratio": round(
            overlap["episodes_per_minute"] / sync["episodes_per_minute"], 3),
    }  # fmt: skip


def regime(args: argparse.Namespace) -> str:
    if args.learner_bound:
        return "learner-bound"
    return "scaled model" if args.hidden or args.layers else "tiny test model"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument(
        "--learner-bound",
        action="store_true",
        help=f"preset {LEARNER_BOUND} (flags below override it)",
    )
    p.add_argument("--hidden", type=int, help="text model width (tiny model: 64)")
    p.add_argument("--layers", type=int, help="text model depth (tiny model: 2)")
    p.add_argument("--torch-threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = p.parse_args(argv)
    if args.learner_bound:
        for key, value in LEARNER_BOUND.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    return args


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="rollout-overlap-") as work:
        print(json.dumps(asyncio.run(main_async(args, Path(work)))), flush=True)


if __name__ == "__main__":
    main()
