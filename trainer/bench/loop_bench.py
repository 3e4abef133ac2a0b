"""`make bench-loop`: the whole GRPO loop on one GPU, desktops replayed, sync and maxStaleness 1.

What it does: runs the trainer's own loop (train.train: rollouts through rollout/episode.py and
the embedded continuous engine, batch, Learner.step with the offloaded AdamW, weight refresh)
against eight stand-in desktops that replay episodes recorded on real desktops, screenshots byte
for byte at the recorded latency (bench/replay_desktop.py says why a stand-in). The model is the
Qwen2.5-VL-3B shape with random weights (bench/shapes.py; the tokenizer is the tiny test model's,
its special ids in the config), bf16, spec.trainer left out so the trainer chooses compile,
checkpointing and offload (speedups/choice.py; --old-defaults: the settings before issue 31); one
task per step, groups of 8, 8 turns of 32 sampled tokens per episode, the recorded 1920x1080
screenshots fitted to 1260x700. Each mode (synchronous, then rollout.maxStaleness 1) runs
--steps steps (default 2) in one process; the first step of each (cold caches, the AdamW state's
creation) is left out of the figures; with maxStaleness 1 also the second and the last
(steady_window says why: run staleness_1 with --steps 4). Prints one JSON document; per mode:
- generation: prefill and decode tokens/s apart (the engine's own counters), generated tokens;
- learner: sequence tokens/s of Learner.step (forward, backward, optimizer), and of its
  forward+backward alone; screenshots and tokens per sample;
- trajectories per minute over the measured steps' wall time;
- gpu_time: the fractions of that wall time the GPU spent generating only, learning only, both
  at once (staleness 1), and idle (no engine round and no learner step), which sum to 1;
- peak GiB (torch.cuda.max_memory_allocated of the mode);
- learner_settings: what the learner ran with (compiled, layers checkpointed, offload).
Then, on the GPU, `make bench-trainer`'s forward+backward case on the loop's samples' shape (their
mean screenshots a sample) with the first mode's learner settings, in a child process of the same
call, and the loop learner's forward+backward tokens/s over it (learner_bench.loop_vs_bench; issue
31's and 46's goal is 0.9); --worst-case-bench adds the case with --turns screenshots.
Without a GPU (or with --smoke) the same loop runs a toy-width model on the CPU with short
episodes and latencies scaled down, and says so: the figures then mean nothing.
How to run: `make bench-loop` (GPU machine: `cd trainer && PYTHONPATH=.:../sandbox-image/client
python3 -m bench.loop_bench --out /tmp/loop.json`). It needs kubecua_trainer's
own dependencies (pydantic, httpx) besides torch and transformers.
Several GPUs (issue 31 item 5): under torchrun (`make bench-loop LOOP_WORLDS="1 2 4"`) each
process is one GPU of one run (trainer.gpusPerNode = the world; nodes on the CPU) and the step
grows with the world (tasksPerStep x world: the same episodes per GPU), each process playing on
its own stand-in desktops, one mode a launch; rank 0 writes the JSON, and bench/loop_scaling.py
launches each world and mode, merges their files and prints the per-GPU loop efficiency
(trajectories/min at world w over w times world 1's) and the disaggregated placement against
colocated sync. Under torchrun the generation figures
and gpu_time are rank 0's own (a learning process of the disaggregated mode generates nothing:
null), and the learner-bench comparison is skipped.
What it leaves out: real desktops (by design), sglang.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import faulthandler
import gc
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
import transformers

from bench.replay_desktop import ReplaySandbox, load_recording

TOKEN = "bench-loop-token"
R720 = 1280 * 720
SMOKE_PIXELS = 112 * 112
GPU = {"steps": 2, "turns": 8, "group": 8, "new_tokens": 32, "latency_scale": 1.0}
SMOKE = {"steps": 2, "turns": 2, "group": 2, "new_tokens": 8, "latency_scale": 0.02}
# mode -> (rollout.maxStaleness, spec.trainer.placement); disaggregated needs a world of 2+
MODES = {"sync": (0, "colocated"), "staleness_1": (1, "colocated"),
         "disaggregated": (1, "disaggregated"),
         "staleness_1_unshared": (1, "colocated"),
         "staleness_1_no_yield": (1, "colocated"),
         "staleness_1_adaptive": (1, "colocated")}  # fmt: skip
# staleness_1_unshared: maxStaleness 1 without gpu_share.py (one stream, no chunk rule), the
# comparison for the GPU sharing; staleness_1_no_yield: gpu_share.py's streams but a learner
# chunk never waits for the engine (max_yield_seconds 0); staleness_1_adaptive: the bound moves
# between steps (gpu_share.ADAPTIVE_YIELD); none of them in the default --modes
UNSHARED = {"staleness_1_unshared"}
NO_YIELD = {"staleness_1_no_yield"}
ADAPTIVE = {"staleness_1_adaptive"}


def world() -> tuple[int, int]:
    """(rank, world size) of this process under torchrun; (0, 1) alone."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def desktops_per_process(a: argparse.Namespace) -> int:
    """Stand-in desktops each process starts: a step's episodes over the processes that play
    them (every process, or a disaggregated run's generators, placement.default_generating)."""
    from kubecua_trainer.placement.placement import default_generating

    _, w = world()
    players = w
    if "disaggregated" in a.modes.split(",") and w > 1:
        players = default_generating(w)
    return math.ceil(a.group * a.tasks_per_step * w / players)


def build_model(out: Path, smoke: bool) -> Path:
    """The tiny test model's directory (tokenizer, processor); on the GPU its weights replaced by
    random bf16 ones of the Qwen2.5-VL-3B shape (vocab 151,936: ids past the tokenizer decode
    to nothing)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from bench.shapes import CONFIGS
    from kubecua_trainer.tiny_models import build_tiny_model

    path = build_tiny_model(out, "qwen2_5_vl")
    widen_processor(path, SMOKE_PIXELS if smoke else R720)
    if smoke:
        return path
    tiny = AutoConfig.from_pretrained(path)
    spec = dict(CONFIGS["qwen2_5_vl_3b"])
    ids = {
        k: getattr(tiny, k)
        for k in (
            "image_token_id",
            "video_token_id",
            "vision_start_token_id",
            "vision_end_token_id",
        )
    }
    text = dict(spec.pop("text_config"))
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        text[k] = getattr(tiny.text_config, k, None)
    config = AutoConfig.for_model(spec.pop("model_type"), **spec, text_config=text, **ids)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model.generation_config = transformers.GenerationConfig.from_pretrained(path)
    model.save_pretrained(path)  # replaces the tiny weights; tokenizer and processor stay
    del model
    torch.cuda.empty_cache()
    return path


def reuse_model(path: Path, smoke: bool) -> Path:
    """--model-dir: the model built there once (bench/loop_scaling.py builds it before its
    launches, so that each launch and each of its processes does not build and write the 3B
    shape's 7 GiB again); built now where it is absent."""
    done = path / ".built"
    if not done.exists():
        build_model(path, smoke)
        done.write_text("smoke\n" if smoke else "gpu\n")
    elif done.read_text().strip() != ("smoke" if smoke else "gpu"):
        raise SystemExit(f"--model-dir {path} holds the {done.read_text().strip()} model")
    return path


def widen_processor(path: Path, max_pixels: int) -> None:
    """The image processor's own cap at the run's rollout.maxPixels (the tiny model's is 802,816
    pixels, below 720p): the recorded 1920x1080 screenshots become 1260x700 (1,125 image tokens)."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(path)
    ip = processor.image_processor
    shortest = min(int(ip.size["shortest_edge"]), max_pixels)
    ip.size = {"shortest_edge": shortest, "longest_edge": max_pixels}
    ip.max_pixels = max_pixels
    processor.save_pretrained(path)


def write_tasks(out: Path) -> list[str]:
    """One task per recorded episode (the stand-in ignores the set-up; the instruction is the
    recording's)."""
    out.mkdir(parents=True, exist_ok=True)
    ids = []
    for line in (Path(__file__).parent / "recordings" / "typeword" / "episodes.jsonl").open():
        row = json.loads(line)
        task = {
            "id": row["task_id"],
            "instruction": row["instruction"],
            "config": [],
            "evaluator": {"func": "replayed"},
        }
        (out / f"{row['task_id']}.json").write_text(json.dumps(task))
        ids.append(row["task_id"])
    return ids


def run_spec(
    model: Path,
    urls: list[str],
    tasks: Path,
    ids: list[str],
    out: Path,
    staleness: int,
    a: argparse.Namespace,
    gpu: bool,
    placement: str = "colocated",
) -> dict[str, Any]:
    _, w = world()
    return {
        "model": {"path": str(model), "dtype": "bfloat16" if gpu else "float32"},
        "sandboxes": {"urls": urls, "minReady": len(urls)},
        "tasks": {"path": str(tasks), "ids": ids},
        "algorithm": {
            "groupSize": a.group,
            "tasksPerStep": a.tasks_per_step * w,  # the same episodes per GPU at any world
            "maxTurns": a.turns,
            "maxNewTokens": a.new_tokens,
            "dynamicSampling": False,
            "learningRate": 1e-6,
        },
        "rollout": {
            "maxPixels": R720 if gpu else SMOKE_PIXELS,
            "episodeTimeoutSeconds": 900,
            "maxStaleness": staleness,
            "maxInFlightEpisodes": a.group * a.tasks_per_step * w,
        },
        "trainer": trainer_fields(a, gpu) | processes(w, gpu, placement),
        "checkpoint": {"everySteps": 1000, "keep": 1},
        "metrics": {"port": 0},
        "steps": a.steps,
        "outputDir": str(out),
    }


# The trainer's settings before issue 31 chose them (--old-defaults): no compile, every layer
# checkpointed, the offloaded AdamW.
OLD_DEFAULTS = {"compile": False, "gradientCheckpointing": True, "optimizerOffload": True}


def trainer_fields(a: argparse.Namespace, gpu: bool) -> dict[str, Any]:
    """spec.trainer: left out (the trainer chooses, speedups/choice.py) unless asked."""
    fields: dict[str, Any] = dict(OLD_DEFAULTS) if a.old_defaults and gpu else {}
    if a.compile:
        fields["compile"] = True
    return fields


def processes(w: int, gpu: bool, placement: str) -> dict[str, Any]:
    """spec.trainer's processes: one a GPU (gpusPerNode) or, on the CPU, one a node."""
    if w == 1:
        return {}
    fields: dict[str, Any] = {"gpusPerNode": w} if gpu else {"nodes": w}
    if placement == "disaggregated":
        fields["placement"] = "disaggregated"
    return fields


def learner_settings(learner: Any) -> dict[str, Any]:
    """What the loop's learner runs with (read from its model and optimizer)."""
    from kubecua_trainer.speedups.checkpointing import layer_stacks

    text, vision = layer_stacks(learner.policy.model)

    def checkpointed(layers: list[Any]) -> str:
        return f"{sum(bool(m.gradient_checkpointing) for m in layers)}/{len(layers)}"

    return {
        "compiled": any(getattr(m, "_compiled_call_impl", None) is not None for m in text),
        "text_checkpointed": checkpointed(text),
        "vision_checkpointed": checkpointed(vision),
        "optimizer_offload": bool(getattr(learner.optimizer, "offload", False)),
    }


def learner_bench(
    a: argparse.Namespace, settings: dict[str, Any], images: int, length: int | None = None
) -> dict[str, Any]:
    """`make bench-trainer`'s forward+backward case on the loop's shape (the 3B shape, one sample
    of `images` screenshots at the loop's 1260x700, opened with earlier turns' text up to `length`
    tokens) with the loop's learner settings, in a child process of this call
    (bench/learner_bench.py run_case)."""
    from bench.learner_bench import run_case

    text_done, text_all = (int(x) for x in settings["text_checkpointed"].split("/"))
    vision_done, vision_all = (int(x) for x in settings["vision_checkpointed"].split("/"))
    spec = {
        "kind": "fwd_bwd", "model": "qwen2_5_vl_3b", "images": images, "size": [1260, 700],
        "text_ckpt": text_done / text_all, "vision_ckpt": vision_done / vision_all,
        "freeze_vision": False,
        "compile": settings["compiled"], "device": "cuda",
        # the loop's settings were chosen for this card's memory (speedups/choice.py), not for
        # bench-trainer's 78 GiB cap (an 80 GB H100)
        "memory_cap": False,
        "length": length,
    }  # fmt: skip
    return {"case": spec} | run_case("loop_shape_fwd_bwd", spec)


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _clip(
    intervals: list[tuple[float, float]], lo: float, hi: float
) -> Iterator[tuple[float, float]]:
    for s, e in intervals:
        if min(e, hi) > max(s, lo):
            yield max(s, lo), min(e, hi)


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def time_split(
    gen: list[tuple[float, float]], learn: list[tuple[float, float]], lo: float, hi: float
) -> dict[str, float]:
    """Fractions of [lo, hi] spent generating only, learning only, both, and neither.

    Example: generating 0-6, learning 4-8 over 0-10 -> 0.4, 0.2, 0.2, 0.2."""
    g = _merge(list(_clip(gen, lo, hi)))
    n = _merge(list(_clip(learn, lo, hi)))
    both = _length([(max(a, c), min(b, d)) for a, b in g for c, d in n if min(b, d) > max(a, c)])
    wall = max(hi - lo, 1e-9)
    gen_s, learn_s = _length(g), _length(n)
    union = gen_s + learn_s - both
    return {
        "generating": round((gen_s - both) / wall, 4),
        "learning": round((learn_s - both) / wall, 4),
        "both": round(both / wall, 4),
        "idle": round(max(0.0, wall - union) / wall, 4),
    }


def steady_window(steps: int, staleness: int) -> tuple[int, int, bool]:
    """(first, end, steady): the steps rows[first:end] that a mode's figures cover, and whether
    they show the steady state. The first step is left out (torch.compile's first calls, the
    AdamW state's creation); with maxStaleness s also the s steps after it, whose rollouts played
    during that cold first update (counting them would charge the cold update to the overlap or
    hide their rollouts behind it), and the last s, whose updates no rollout overlaps (a run's
    end, not its pace). Fewer than 2 + 2s steps: only the first is left out, and it is not the
    steady state (issue 31 item 4: use --steps 4 for staleness_1)."""
    if steps < 2:
        return 0, steps, False
    if staleness and steps >= 2 + 2 * staleness:
        return 1 + staleness, steps - staleness, True
    return 1, steps, staleness == 0


def summarise(
    rows: list[dict[str, Any]], engine: Any, learner: Any, staleness: int
) -> dict[str, Any]:
    """One mode's figures over its measured steps: from the end of the last left-out step's
    update to the end of the last measured step's (steady_state says whether it is one)."""
    first, end, steady = steady_window(len(rows), staleness)
    measured = rows[first:end]
    update = deferred_updates(learner, len(rows))[first:end]
    lo = rows[first - 1]["learn_ended_at"] if first else measured[0]["rollout_started_at"]
    hi = max(r["learn_ended_at"] for r in measured)
    # every step's learning (with staleness 1 the first update overlaps the measured rollout)
    learn = [
        (r["learn_started_at"], r["learn_ended_at"] + r.get("weight_refresh_seconds", 0.0))
        for r in rows
    ]
    b = getattr(engine, "scheduler", None)  # None: a disaggregated run's learner (rank 0)
    episodes = sum(int(r["episodes"]) for r in measured)
    seq_tokens = sum(r.get("sequence_tokens", 0.0) for r in measured)
    learn_seconds = sum(r.get("seconds", 0.0) for r in measured)
    optimizer_seconds = sum(r.get("optimizer_seconds", 0.0) for r in measured)
    samples = sum(r.get("samples", 0.0) for r in measured)
    return {
        "max_staleness": staleness,
        "steps_measured": len(measured),
        "steady_state": steady,
        "window": [round(lo, 3), round(hi, 3)],  # time.time() of the measured steps
        "wall_seconds": round(hi - lo, 2),
        "trajectories": episodes,
        "trajectories_per_minute": round(60 * episodes / (hi - lo), 2),
        # the bound when one GPU does both: the learner's own rate on these trajectories, back
        # to back (its deferred updates included: nothing hides them there)
        "learner_only_trajectories_per_minute": round(
            60 * episodes / max(learn_seconds + sum(update), 1e-9), 2
        ),
        "vs_learner_only": round((learn_seconds + sum(update)) / max(hi - lo, 1e-9), 3),
        # the engine's counters cover every step of the mode, the first included
        "generation": generation_figures(engine) if b is not None else None,
        "learner": {
            "sequence_tokens": seq_tokens,
            "seconds": round(learn_seconds, 2),
            "tokens_per_second": round(seq_tokens / max(learn_seconds, 1e-9), 1),
            # forward+backward alone (the step less the optimizer's seconds in it): what
            # learner_bench's fwd_bwd case measures, so the two can be compared (issue 46)
            "fwd_bwd_tokens_per_second": round(
                seq_tokens / max(learn_seconds - optimizer_seconds, 1e-9), 1
            ),
            # the shape the learner saw: the in-loop/bench comparison runs the bench on it
            "images_per_sample": round(
                sum(r.get("images", 0.0) for r in measured) / max(samples, 1.0), 2
            ),
            "tokens_per_sample": round(seq_tokens / max(samples, 1.0), 1),
            # in optimizer.step() (deferred: queueing the gradients' copies), and the host
            # update after it; fence_wait: the time anything (the next step's first generation,
            # the next learner step) waited for one (0: the update was hidden entirely)
            "optimizer_seconds": [round(r.get("optimizer_seconds", 0.0), 3) for r in measured],
            "deferred_update_seconds": [round(x, 3) for x in update],
            "fence_wait_seconds": round(
                sum(s for end, s in learner.policy.lock.wait_log if lo <= end <= hi), 3
            ),
            # issue 24 item 3: the step's forward+backward seconds over its whole own seconds
            "fwd_bwd_share": round(1 - optimizer_seconds / max(learn_seconds, 1e-9), 3),
            # gpu_share.py: the seconds a step's chunks waited for the engine to idle
            "yield_seconds": [round(r.get("share_yield_seconds", 0.0), 2) for r in measured],
            "yield_bound_seconds": [round(r.get("share_yield_bound", 0.0), 3) for r in measured],
            "weight_refresh_seconds": [
                round(r.get("weight_refresh_seconds", 0.0), 3) for r in measured
            ],
        },
        "learner_settings": learner_settings(learner),
        "gpu_time": time_split(list(b.busy_intervals) if b is not None else [], learn, lo, hi),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else None,
        "reward_mean": round(sum(r.get("reward_mean", 0.0) for r in measured) / len(measured), 3),
    }


def generation_figures(engine: Any) -> dict[str, Any]:
    b = engine.scheduler
    graphs = b.runner.graphs
    return {
        "prefill_tokens": b.prefill_tokens,
        "prefill_tokens_per_second": round(b.prefill_tokens / max(b.prefill_seconds, 1e-9), 1),
        "decode_tokens": engine.tokens_generated,
        "decode_tokens_per_second": round(engine.tokens_generated / max(b.decode_seconds, 1e-9), 1),
        "reused_prompt_tokens": b.reused_tokens,
        "prefill_seconds": round(b.prefill_seconds, 2),
        "decode_seconds": round(b.decode_seconds, 2),
        "images_encoded": b.images_encoded,
        "cuda_graphs": graphs is not None and not graphs.broken,
        "graph_captures": graphs.captures if graphs is not None else 0,
    }


def deferred_updates(learner: Any, steps: int) -> list[float]:
    """The seconds of the last `steps` host updates that ran after their step (MasterAdamW with
    defer), oldest first; zeros when the optimizer updates inside its step."""
    opt = learner.optimizer
    if not getattr(opt, "defer", False):
        return [0.0] * steps
    with learner.policy.lock:  # the last step's update is settled
        return [u["update"] for u in list(opt.updates)[-steps:]]


async def one_mode(
    model: Path,
    sandboxes: list[ReplaySandbox],
    work: Path,
    ids: list[str],
    mode: str,
    a: argparse.Namespace,
    gpu: bool,
) -> dict[str, Any] | None:
    """The mode's figures on rank 0; None on the other processes of a torchrun world."""
    from kubecua_trainer.config import API_VERSION, KIND, parse_training_run
    from kubecua_trainer.parallel import gpu_share
    from kubecua_trainer.run.train import RunOptions, train
    from kubecua_trainer.sources.static import StaticSource

    staleness, placement = MODES[mode]
    urls = [s.url for s in sandboxes]
    out = work / f"out-{mode}"
    spec = run_spec(model, urls, work / "tasks", ids, out, staleness, a, gpu, placement)
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": f"loop-{mode.replace('_', '-')}"},
        "spec": spec,
    }
    built: list[tuple[Any, Any]] = []  # (engine, learner)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    opts = RunOptions(
        console=False,
        source=StaticSource(urls, TOKEN),
        on_built=lambda engine, learner: built.append((engine, learner)),
        checkpoints=False,  # the 3B shape's optimizer state would fill the machine's disk
        share_gpu=mode not in UNSHARED,
    )
    yield_bound, adaptive = gpu_share.MAX_YIELD_SECONDS, gpu_share.ADAPTIVE_YIELD
    gpu_share.MAX_YIELD_SECONDS = 0.0 if mode in NO_YIELD else yield_bound
    gpu_share.ADAPTIVE_YIELD = mode in ADAPTIVE or adaptive
    try:
        result = await train(parse_training_run(obj), opts)
    finally:
        gpu_share.MAX_YIELD_SECONDS, gpu_share.ADAPTIVE_YIELD = yield_bound, adaptive
    if not result.main:
        if placement == "disaggregated" and built:
            write_generator_figures(built[0][0], a)
        return None
    if len(result.history) != a.steps:
        raise RuntimeError(f"mode {mode}: {len(result.history)} of {a.steps} steps ran")
    engine, learner = built[0]
    return summarise(result.history, engine, learner, staleness) | {"placement": placement}


def generator_file(out: str) -> Path:
    """Where the first generating process of a disaggregated launch leaves its engine's figures
    (loop_scaling.merge_generator folds them into the launch's file, then removes it)."""
    return Path(out).with_suffix(".generator.json")


def write_generator_figures(engine: Any, a: argparse.Namespace) -> None:
    """Rank 0 learns in the disaggregated placement, so its file has no generation figures; the
    first generator writes its own: the engine's counters and its busy intervals (time.time(),
    the clock of rank 0's measured window)."""
    from kubecua_trainer.placement.placement import default_generating

    rank, w = world()
    b = getattr(engine, "scheduler", None)
    if not a.out or b is None or rank != w - default_generating(w):
        return
    doc = {"rank": rank, "generation": generation_figures(engine),
           "busy_intervals": list(b.busy_intervals)}  # fmt: skip
    generator_file(a.out).write_text(json.dumps(doc))


async def main_async(a: argparse.Namespace, work: Path, gpu: bool) -> dict[str, Any]:
    model = (
        reuse_model(Path(a.model_dir), not gpu)
        if a.model_dir
        else build_model(work / "model", not gpu)
    )
    ids = write_tasks(work / "tasks")
    recording = load_recording()
    with ExitStack() as stack:
        sandboxes = [
            stack.enter_context(ReplaySandbox(recording, TOKEN, a.latency_scale, i))
            for i in range(desktops_per_process(a))
        ]
        modes: dict[str, Any] = {}
        rank, w = world()
        for name in MODES:
            if name not in a.modes.split(","):
                continue
            if MODES[name][1] == "disaggregated" and w < 2:
                print(f"{name}: skipped, it needs a world of 2 or more", file=sys.stderr)
                continue
            figures = await one_mode(model, sandboxes, work, ids, name, a, gpu)
            gc.collect()  # the mode's model, engine and pinned optimizer state go before the next
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if figures is None:  # not rank 0
                continue
            modes[name] = figures
            print(f"{name}: {json.dumps(modes[name])}", file=sys.stderr, flush=True)
            if a.out:  # what is done survives a time limit
                Path(a.out).write_text(json.dumps(header(a, gpu, recording) | {"modes": modes}))
    doc = header(a, gpu, recording) | {"modes": modes}
    if rank != 0:
        return doc
    if gpu and modes and not a.no_learner_bench and w == 1:
        first = next(iter(modes.values()))
        doc["learner_bench"] = compare_with_bench(a, first)
        if a.worst_case_bench:  # bench-trainer's "loop's shape": every turn's screenshot kept
            doc["learner_bench_worst_case"] = learner_bench(a, first["learner_settings"], a.turns)
    return doc


def compare_with_bench(a: argparse.Namespace, mode: dict[str, Any]) -> dict[str, Any]:
    """The in-loop learner's forward+backward rate over the learner bench's on samples of the
    same shape (issue 46's goal is 0.9). The bench runs one sample with as many screenshots as
    the loop's samples held on average, as many tokens long as theirs; the loop's rate leaves out
    the optimizer's seconds, which the bench's fwd_bwd case does not have. Comparing with --turns
    screenshots (2,688 against 9,976 tokens a sample on the recorded episodes, which keep one
    screenshot) measured the sample length, not the loop."""
    learner = mode["learner"]
    images = max(1, round(learner.get("images_per_sample") or a.turns))
    length = round(learner["tokens_per_sample"]) if learner.get("tokens_per_sample") else None
    bench = learner_bench(a, mode["learner_settings"], images, length)
    loop_rate = learner.get("fwd_bwd_tokens_per_second") or learner["tokens_per_second"]
    bench_rate = bench.get("tokens_per_second")
    return bench | {
        "loop_tokens_per_sample": learner.get("tokens_per_sample"),
        "loop_learner_tokens_per_second": loop_rate,
        "loop_vs_bench": round(loop_rate / bench_rate, 3) if bench_rate else None,
    }


def header(a: argparse.Namespace, gpu: bool, recording: list[Any]) -> dict[str, Any]:
    _, w = world()
    return {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "world": w,
        "smoke": not gpu,
        "note": ""
        if gpu
        else "no GPU or --smoke: toy-width model, short episodes, latencies "
        f"x{a.latency_scale}: a smoke run; the figures mean nothing",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": "tiny test model" if not gpu else "Qwen2.5-VL-3B shape, random weights, bf16",
        "workload": {
            "group_size": a.group,
            "turns": a.turns,
            "max_new_tokens": a.new_tokens,
            "steps_per_mode": a.steps,
            "tasks_per_step": a.tasks_per_step * w,
            "desktops_per_process": desktops_per_process(a),
            "recorded_episodes": [r.key for r in recording],
            "latency_scale": a.latency_scale,
            "trainer": trainer_fields(a, gpu),
            "levers": {
                "vision_by_memory": a.vision_by_memory,
                "prefetch_pixels": a.prefetch_pixels,
            },
        },
    }


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, bool]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="toy-width CPU run even with a GPU")
    p.add_argument("--steps", type=int, help="steps per mode (the first is not measured)")
    p.add_argument("--turns", type=int)
    p.add_argument("--group", type=int, help="episodes per group (= desktops)")
    p.add_argument(
        "--tasks-per-step",
        type=int,
        default=1,
        help="groups per step and GPU (desktops = group x this x the world)",
    )
    p.add_argument(
        "--modes",
        default="sync,staleness_1",
        help="which of sync,staleness_1,disaggregated,staleness_1_unshared to run "
        "(disaggregated: world 2+)",
    )
    p.add_argument("--new-tokens", type=int, help="algorithm.maxNewTokens")
    p.add_argument("--latency-scale", type=float, help="x the recorded desktop latencies")
    p.add_argument("--compile", action="store_true", help="trainer.compile: true")
    p.add_argument(
        "--old-defaults",
        action="store_true",
        help="the trainer settings before issue 31: no compile, full checkpointing, offload",
    )
    p.add_argument(
        "--vision-by-memory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="issue 46: as few checkpointed vision blocks as the memory estimate allows "
        "(speedups/choice.py VISION_BY_MEMORY, the default; --no-vision-by-memory: all of them)",
    )
    p.add_argument(
        "--prefetch-pixels",
        action="store_true",
        help="issue 46: the next sample's pixels copied to the GPU during this one "
        "(speedups/prefetch.py PREFETCH_PIXELS)",
    )
    p.add_argument(
        "--no-learner-bench",
        action="store_true",
        help="skip bench-trainer's forward+backward on the loop's shape after the modes",
    )
    p.add_argument(
        "--worst-case-bench",
        action="store_true",
        help="also run the learner bench with --turns screenshots a sample (the memory choice's "
        "worst case, bench-trainer's shape)",
    )
    p.add_argument("--out", default="", help="also write the JSON here")
    p.add_argument(
        "--model-dir",
        default="",
        help="reuse the model built in this folder (built there first when absent)",
    )
    p.add_argument("--build-model", action="store_true", help="only build the model in --model-dir")
    a = p.parse_args(argv)
    gpu = torch.cuda.is_available() and not a.smoke
    for key, value in (GPU if gpu else SMOKE).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.steps < 1 or a.turns < 1 or a.group < 2:
        p.error("--steps and --turns must be at least 1, --group at least 2")
    if world()[1] > 1 and len(a.modes.split(",")) > 1:
        # Each mode is a whole run, which joins the process group and leaves it at its end; a
        # second join in the same processes hung once in three tries here (gloo, 2026-11-28).
        p.error("under torchrun give one mode per launch (bench/loop_scaling.py runs one each)")
    return a, gpu


def apply_options(a: argparse.Namespace) -> None:
    """Issue 46's learner levers as asked, for this process's runs (unasked: the defaults)."""
    from kubecua_trainer.speedups import choice, prefetch

    if a.vision_by_memory is not None:
        choice.VISION_BY_MEMORY = a.vision_by_memory
    prefetch.PREFETCH_PIXELS = prefetch.PREFETCH_PIXELS or a.prefetch_pixels


def missing_modules() -> list[str]:
    """The trainer's own dependencies that this interpreter lacks (the GPU machine has torch and
    transformers, perhaps not these)."""
    import importlib.util

    names = ("pydantic", "httpx", "yaml", "prometheus_client", "kubecua_sandbox_client")
    return [n for n in names if importlib.util.find_spec(n) is None]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a, gpu = parse_args(argv)
    missing = missing_modules()
    if missing:
        sys.exit(
            f"bench-loop needs {missing} importable (PYTHONPATH=.:../sandbox-image/client "
            "for kubecua_sandbox_client); the trainer's rollout code imports them"
        )
    start = time.monotonic()
    rank, _ = world()
    apply_options(a)
    # A launch stopped at its time limit (loop_scaling) or by torchrun gets SIGTERM: every
    # thread's stack goes to stderr first, so a hang says where each process waited.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    if gpu:  # under torchrun: this process's GPU before the model is built on it
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if a.build_model:
        if not a.model_dir:
            sys.exit("--build-model needs --model-dir")
        reuse_model(Path(a.model_dir), not gpu)
        return {"model_dir": a.model_dir}
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as work:
        doc = asyncio.run(main_async(a, Path(work), gpu))
    doc["seconds"] = round(time.monotonic() - start, 1)
    if rank != 0:
        return doc
    text = json.dumps(doc, indent=1)
    print(text, flush=True)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
