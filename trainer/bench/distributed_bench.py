"""Distributed learner figures on the GPUs there are: weight refresh and FSDP2 learner speed.

Run under torchrun (world 1 works: `make bench-trainer-distributed`; NPROC=2 on a 2-GPU machine):
- refresh: seconds for refresh_weights to copy FSDP2-sharded fp32 master weights (model.dtype
  auto) into each rank's bf16 generation copy, Qwen2.5-VL 3B and 7B shapes, median of 3 after a
  warm-up. At world 1 the all-gather is a local copy: the figure is the cast and copy cost only,
  without the NCCL transfer a multi-GPU run adds.
- learner: tokens/s of one learner step (4 screenshots at 1280x720 per rank, ~5.3k tokens, full
  activation checkpointing, bf16 weights, AdamW) by the plain single-process learner and by the
  FSDP2 learner on the same model and sample, and their peak memory, per GPU; with --levers
  also the FSDP2 learner with host offload (CPUOffloadPolicy) and with compiled layers; with
  --full-hd also the FSDP2 step on one 15-screenshot 1920x1080 episode per rank (42k tokens), whose
  peak memory says whether that episode still fits on each GPU.
Rank 0 prints one JSON line. Without a GPU it runs the toy-width shape and says so.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import time
from typing import Any

import torch

from bench.cases import ALGO
from bench.shapes import bench_policy, build_model, synthetic_sample
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.sharded import refresh_weights, shard_policy
from kubecua_trainer.parallel.distributed import Dist, init_from_env, shutdown
from kubecua_trainer.speedups.checkpointing import set_checkpointing
from kubecua_trainer.speedups.fast_paths import apply_fast_paths, compile_layers


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def refresh_figures(shape: str, device: str, d: Dist) -> dict[str, Any]:
    torch.manual_seed(0)
    gen_model = build_model(shape, device)  # bf16 on a GPU: the engine's copy
    gen = bench_policy(gen_model)
    master = copy.deepcopy(gen_model).to(torch.float32)  # the learner's fp32 masters
    policy = bench_policy(master)
    policy.dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shard_policy(policy)
    refresh_weights(master, gen, 0)  # warm-up
    times = [refresh_weights(master, gen, i) for i in range(1, 4)]
    params = sum(p.numel() for p in gen_model.parameters())
    seconds = statistics.median(times)
    out = {"shape": shape, "params": params, "seconds": round(seconds, 4),
           "gen_gib_per_second": round(params * 2 / seconds / 2**30, 1)}  # fmt: skip
    del gen_model, gen, master, policy
    _free()
    return out


def step_figures(
    shape: str,
    device: str,
    d: Dist,
    sharded: bool,
    images: int,
    lever: str = "",
    size: tuple[int, int] = (1280, 720),
) -> dict[str, Any]:
    """lever: "" (none), "offload" (CPUOffloadPolicy) or "compile" (compiled layers), FSDP2.
    Each rank learns from one sample of `images` screenshots of `size` pixels."""
    torch.manual_seed(0)
    model = build_model(shape, device)
    if device == "cuda":
        apply_fast_paths(model)
    set_checkpointing(model, 1.0, 1.0)
    if lever == "compile":
        compile_layers(model)
    policy = bench_policy(model)
    if sharded:
        net = shard_policy(policy, offload=lever == "offload")
        learner = Learner(policy, ALGO, net=net, dist=d)
        batch = [synthetic_sample(model, images, *size, seed) for seed in range(d.world)]
    else:
        learner = Learner(policy, ALGO)
        batch = [synthetic_sample(model, images, *size, d.rank)]
    learner.step(batch)  # warm-up (AdamW state, kernels, compilation)
    times = []
    for _ in range(3):
        _sync()
        start = time.perf_counter()
        learner.step(batch)
        _sync()
        times.append(time.perf_counter() - start)
    tokens = sum(int(s.input_ids.numel()) for s in batch)
    per_rank = tokens / (d.world if sharded else 1)
    seconds = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    out = {"tokens_per_rank": int(per_rank), "seconds": round(seconds, 3),
           "tokens_per_second_per_gpu": round(per_rank / seconds, 1),
           "peak_gib": round(peak, 1)}  # fmt: skip
    del model, policy, learner, batch
    _free()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="also write the JSON here (rank 0)")
    p.add_argument("--skip-7b", action="store_true")
    p.add_argument("--levers", action="store_true", help="also FSDP2 + offload, FSDP2 + compile")
    p.add_argument(
        "--full-hd",
        action="store_true",
        help="also the FSDP2 step on a 15 x 1920x1080 episode per rank (does it fit?)",
    )
    args = p.parse_args()
    d = init_from_env(min_world=1)
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    shapes = ["qwen2_5_vl_3b"] + ([] if args.skip_7b else ["qwen2_5_vl_7b"])
    if not gpu:
        shapes = ["tiny_qwen2_5_vl"]
    if not d.enabled:
        raise SystemExit("run under torchrun (any --nproc-per-node, 1 included)")
    result: dict[str, Any] = {
        "world": d.world,
        "device": torch.cuda.get_device_name() if gpu else "cpu (toy-width smoke, not a figure)",
        "torch": torch.__version__,
        "refresh": [refresh_figures(s, device, d) for s in shapes],
    }
    images = 4 if gpu else 1
    plain = step_figures(shapes[0], device, d, sharded=False, images=images)
    fsdp = step_figures(shapes[0], device, d, sharded=True, images=images)
    ratio = fsdp["tokens_per_second_per_gpu"] / plain["tokens_per_second_per_gpu"]
    result["learner"] = {"shape": shapes[0], "plain": plain, "fsdp2": fsdp,
                         "fsdp2_over_plain": round(ratio, 3)}  # fmt: skip
    if args.levers:
        result["learner"]["fsdp2_levers"] = {
            lever: step_figures(shapes[0], device, d, sharded=True, images=images, lever=lever)
            for lever in ("offload", "compile")
        }
    if args.full_hd:
        full = 15 if gpu else 2
        result["learner"]["fsdp2_15x1080p"] = step_figures(
            shapes[0], device, d, sharded=True, images=full, size=(1920, 1080)
        )
    if d.is_main:
        line = json.dumps(result)
        print(line, flush=True)
        if args.out:
            with open(args.out, "w") as f:
                f.write(line + "\n")
    shutdown(d)


if __name__ == "__main__":
    main()
