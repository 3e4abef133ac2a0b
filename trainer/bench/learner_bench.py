"""`make bench-trainer`: the learner's speed and memory beside naive transformers, in one run.

What it does: on a CUDA GPU, builds Qwen2.5-VL-3B- and Qwen3-VL-4B-shaped models with random
weights (no download) and synthetic multi-turn samples in the real token layout, and measures, each
case in its own process: the naive baseline (plain HF forward, full-vocabulary fp32 log-softmax over
the whole sequence, with and without gradient checkpointing), the vision tower alone (SDPA vs varlen
flash attention), the optimised learner forward+backward on 8 x 1280x720, and full learner steps
(forward, backward, clipping, AdamW with offloaded fp32 master state) on 15 x 1920x1080 for both
shapes and on a GRPO batch of 8 trajectories x 8 screenshots, a LoRA adapter's step on the 7B shape
on 15 x 1920x1080 (issue 33; bench/cases.py lora_step), with the pipelined offloaded AdamW
step, with the serial one and with the deferred one the trainer uses (speedups/optimizer.py;
step_rate_vs_fwd_bwd: the whole step's tokens/s over forward+backward's, back to back, and for the
deferred step also its own, without the wait for the previous step's update). Prints one JSON
document: per case tokens/s, TFLOP/s (bench/flops.py), peak GiB and step seconds, and the
speed-up over the baseline.
Without a GPU it runs the same cases on a toy-width model as a smoke test and says so.
What it leaves out: generation, and multi-GPU (FSDP2) runs.
How to run: `make bench-trainer` (GPU machine: `cd trainer && PYTHONPATH=. python3 -m
bench.learner_bench --out /tmp/bench.json`); `--only NAME,...` picks cases.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import torch
import transformers

R720, R1080 = (1280, 720), (1920, 1080)
_3B = {"model": "qwen2_5_vl_3b", "images": 8, "size": R720}
_OPT = {"text_ckpt": 0.0, "vision_ckpt": 1.0, "freeze_vision": False, "compile": True}
_STEP = {"repeats": 1, "offload": True}
GPU_CASES: dict[str, dict[str, Any]] = {
    "naive_8x720_no_ckpt": {"kind": "naive", **_3B, "checkpointing": False},
    "naive_8x720_ckpt": {"kind": "naive", **_3B, "checkpointing": True},
    "vision_8x720": {"kind": "vision", **_3B},
    "opt_8x720": {"kind": "fwd_bwd", **_3B, **_OPT},
    "opt_8x720_frozen_vision": {"kind": "fwd_bwd", **_3B, **_OPT, "freeze_vision": True},
    "step_15x1080_3b": {"kind": "learner_step", **_3B, "images": 15, "size": R1080, **_OPT,
                        "text_ckpt": 1.0, "samples": 1, **_STEP},
    "step_15x1080_4b": {"kind": "learner_step", **_3B, "model": "qwen3_vl_4b", "images": 15,
                        "size": R1080, **_OPT, "text_ckpt": 1.0, "samples": 1, **_STEP},
    # issue 33: the 7B shape training a LoRA adapter (rank 16 on q, k, v, o: the spec's
    # defaults) on the same episode, eager (no compile) like its full fine-tuning twin
    # step_15x1080_3b_eager (in SWEEP): compare the two, measured in one call
    "step_15x1080_7b_lora": {"kind": "lora_step", **_3B, "model": "qwen2_5_vl_7b", "images": 15,
                             "size": R1080, **_OPT, "text_ckpt": 1.0, "samples": 1,
                             "repeats": 2, "lora": {"rank": 16}, "compile": False},
    "grpo_8x8x720_3b": {"kind": "learner_step", **_3B, **_OPT, "samples": 8, **_STEP},
    # the offloaded AdamW step as it was before issue 24 item 3: no pipeline (the same bits)
    "grpo_8x8x720_3b_serial": {"kind": "learner_step", **_3B, **_OPT, "samples": 8, **_STEP,
                               "pipeline": False},
    # the trainer's optimizer: the host update deferred to the next reader of the weights
    # (3 timed steps, the median: the first waits for the untimed step's update, which creates
    # the AdamW state and is slower)
    "grpo_8x8x720_3b_deferred": {"kind": "learner_step", **_3B, **_OPT, "samples": 8, **_STEP,
                                 "defer": True, "repeats": 3},
}  # fmt: skip
# Extra variants for tuning (--only): how much checkpointing pays.
SWEEP: dict[str, dict[str, Any]] = {
    f"opt_8x720_text{t}_vision{v}": {"kind": "fwd_bwd", **_3B, **_OPT, "text_ckpt": t,
                                     "vision_ckpt": v}
    for t, v in ((1.0, 1.0), (0.5, 1.0), (0.0, 0.5))
} | {"opt_8x720_eager": {"kind": "fwd_bwd", **_3B, **_OPT, "compile": False},
     # full fine-tuning of the 3B shape as step_15x1080_3b, eager: the LoRA case's baseline
     "step_15x1080_3b_eager": {"kind": "learner_step", **_3B, "images": 15, "size": R1080,
                               **_OPT, "text_ckpt": 1.0, "samples": 1, **_STEP,
                               "compile": False}}  # fmt: skip
_TINY = {"model": "tiny_qwen2_5_vl", "images": 2, "size": (112, 112), "compile": False}
CPU_CASES: dict[str, dict[str, Any]] = {
    "naive_ckpt": {"kind": "naive", **_TINY, "checkpointing": True},
    "vision": {"kind": "vision", **_TINY},
    "opt": {"kind": "fwd_bwd", **_OPT, **_TINY},
    "step": {"kind": "learner_step", **_OPT, **_TINY, "samples": 2, "offload": False},
    "step_offload": {"kind": "learner_step", **_OPT, **_TINY, "samples": 2, "offload": True},
    "step_offload_serial": {"kind": "learner_step", **_OPT, **_TINY, "samples": 2,
                            "offload": True, "pipeline": False},
    "step_offload_deferred": {"kind": "learner_step", **_OPT, **_TINY, "samples": 2,
                              "offload": True, "defer": True},
    "step_lora": {"kind": "lora_step", **_OPT, **_TINY, "samples": 2, "lora": {"rank": 4}},
}  # fmt: skip


# The goal is one 80 GB H100: on a larger GPU (an H200) the allocator is capped to what an H100
# leaves a process, so an out-of-memory here is one there too.
MEMORY_CAP_GIB = 78.0


def cap_memory() -> float | None:
    """Limit this process's CUDA allocator to MEMORY_CAP_GIB; returns the cap (None: no GPU)."""
    if not torch.cuda.is_available():
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, MEMORY_CAP_GIB * 2**30 / total))
    return min(MEMORY_CAP_GIB, total / 2**30)


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one case in this process; out of memory is a result, not a failure."""
    from bench.cases import CASES

    if spec.get("memory_cap", True):  # bench-loop's case: settings chosen for the whole card
        cap_memory()
    args = SimpleNamespace(**{"repeats": 2, "device": "cuda", "compile": False} | spec)
    args.size = tuple(args.size)
    try:
        return CASES[spec["kind"]](args)
    except torch.OutOfMemoryError:
        peak = torch.cuda.max_memory_allocated() / 2**30
        return {"result": "out of memory", "peak_gib": round(peak, 1)}


def run_case(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run a case in a fresh process and parse its RESULT line."""
    cmd = [sys.executable, "-m", "bench.learner_bench", "--child", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"result": "error", "returncode": proc.returncode, "tail": tail}


def speedups(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """tokens/s of each optimised forward+backward case over the checkpointed naive baseline.

    Example: naive 1,230 tokens/s and opt_8x720 6,150 tokens/s -> {"opt_8x720": 5.0}.
    """
    base = results.get("naive_8x720_ckpt", {}).get("tokens_per_second")
    if not base:
        return {}
    return {
        name: round(r["tokens_per_second"] / base, 2)
        for name, r in results.items()
        if name.startswith("opt_") and r.get("tokens_per_second")
    }


def step_vs_fwd_bwd(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """tokens/s of each whole learner step (optimizer included) over the forward+backward case
    of the same trajectories (issue 24 item 3: the goal is 0.9 or more).

    Example: opt_8x720 10,044 tokens/s and grpo_8x8x720_3b 7,068 -> {"grpo_8x8x720_3b": 0.7}."""
    base = results.get("opt_8x720", results.get("opt", {})).get("tokens_per_second")
    if not base:
        return {}
    out = {}
    for name, r in results.items():
        if (
            name.startswith(("grpo_", "step"))
            and "15x1080" not in name
            and r.get("tokens_per_second")
        ):
            out[name] = round(r["tokens_per_second"] / base, 3)
            if r.get("defer"):  # its own seconds, without the previous update it waited for
                out[name + ":critical"] = round(r["critical_tokens_per_second"] / base, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--out", default="", help="also write the JSON here")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_child(json.loads(args.child))), flush=True)
        return
    gpu = torch.cuda.is_available()
    cases = (GPU_CASES | SWEEP) if gpu else CPU_CASES
    names = args.only.split(",") if args.only else list(GPU_CASES if gpu else CPU_CASES)
    unknown = [n for n in names if n not in cases]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {sorted(cases)}")
    device = "cuda" if gpu else "cpu"
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        results[name] = run_case(name, {**cases[name], "device": device})
        print(f"{name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    doc = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "smoke": not gpu,
        "memory_cap_gib": MEMORY_CAP_GIB if gpu else None,
        "note": "" if gpu else "no GPU: toy-width model, a smoke run; the figures mean nothing",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cases": results,
        "speedup_vs_naive_ckpt": speedups(results),
        "step_rate_vs_fwd_bwd": step_vs_fwd_bwd(results),
    }
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
