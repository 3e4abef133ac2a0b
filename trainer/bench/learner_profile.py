"""Where the learner's forward+backward spends its GPU time on the loop's shape, and what the cheap
knobs change (issue 46), in one process.

What it does: builds the Qwen2.5-VL-3B shape with random weights (bench/shapes.py) and one
synthetic sample of the loop's shape (8 screenshots of 1260x700, bench-loop's), sets the
learner's settings (`--text-ckpt`, `--vision-ckpt`, compile on CUDA; bench-trainer's
`opt_8x720` case) and runs Learner._sample_terms (forward, chunked log-probs, GRPO loss,
backward), as `bench.learner_bench`'s fwd_bwd case does. Then, stage by stage (each writes the
JSON, so a time limit keeps what is done):
1. baseline: median seconds of --repeats runs after two warm-ups (compile), tokens/s, TFLOP/s
   (bench/flops.py: recompute counted, as bench-trainer counts) and model TFLOP/s (recompute not
   counted), peak GiB;
2. phases: GPU seconds of vision forward, text forward, LM head and loss (forward and its
   backward), text backward, vision backward (with the checkpointed blocks' recompute), from CUDA
   events recorded by module and gradient hooks;
3. profile: one run under torch.profiler; every GPU kernel's time by kind (matmul, attention by
   backend, torch.compile's fused kernels, eager elementwise, ...), per phase (marker kernels
   launched by the same hooks split the GPU timeline), and the GPU's idle share of the run;
4. variants, each timed alone in this process: fewer checkpointed vision blocks (--vision
   fractions); the screenshots' pixels already on the GPU (their copy's cost); Learner.step over
   3 samples with the next one's pixels prefetched and without; the optimizer's update with fp32
   masters and moments on the GPU (MasterAdamW offload off); the text attention alone per SDPA
   backend (flash, cuDNN, memory-efficient) on this length, against fp32; and the learner with
   its text attention through cuDNN's SDPA (compiled graphs re-traced), its log-probs and
   gradients against flash's, beside flash's own run-to-run difference.
Without a GPU it runs the tiny model on 112x112 screenshots (no compile, no profile of kernels)
as a smoke test of the code paths; the figures then mean nothing.
How to run: `cd trainer && PYTHONPATH=. python3 -m bench.learner_profile --out /tmp/profile.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
import transformers

from bench.cases import ALGO
from bench.flops import train_flops
from bench.learner_bench import cap_memory
from bench.shapes import bench_policy, build_model, flop_shape, synthetic_sample
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.speedups.attention import text_attention
from kubecua_trainer.speedups.checkpointing import set_checkpointing
from kubecua_trainer.speedups.fast_paths import apply_fast_paths

# kernel-name patterns -> kind, first match wins (attention before matmul: cuDNN's and flash's
# attention kernels are matrix kernels too)
KINDS: list[tuple[str, str]] = [
    ("marker", r"spin_kernel"),
    ("attention: mem-efficient", r"fmha_cutlass|efficient_attention|attention_kernel"),
    ("attention: cuDNN", r"cudnn|sdpa|fmha|fprop|dgrad.*attn"),
    ("attention: flash", r"flash"),
    ("matmul", r"gemm|nvjet|cutlass|xmma|wgmma|cublas|sm90_|sm80_"),
    ("fused by torch.compile (triton)", r"^triton_"),
    ("softmax/log-softmax (eager)", r"softmax"),
    ("reduction (eager)", r"reduce|norm_kernel|sum_kernel"),
    ("index/gather/scatter/embedding", r"index|gather|scatter|embedding|sort|radix"),
    ("copy/cat/fill", r"copy|cat|memcpy|memset|fill|transpose"),
    ("elementwise (eager)", r"elementwise|vectorized|unrolled|foreach"),
]
PHASES = ("vision forward", "merge", "text forward", "LM head + loss (fwd+bwd)",
          "text backward (+ merge backward)", "vision backward (+ recompute)")  # fmt: skip


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _peak() -> float | None:
    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 1)


class Bench:
    """The model, the sample and the learner of one process; run() is one forward+backward."""

    def __init__(self, a: argparse.Namespace, gpu: bool):
        self.gpu = gpu
        self.device = "cuda" if gpu else "cpu"
        self.model = build_model(a.model, self.device)
        self.text_ckpt, self.vision_ckpt = a.text_ckpt, a.vision_ckpt
        set_checkpointing(self.model, self.text_ckpt, self.vision_ckpt)
        self.fast = apply_fast_paths(self.model, gpu)
        self.policy = bench_policy(self.model)
        self.learner = Learner(self.policy, ALGO)
        self.sample = synthetic_sample(self.model, a.images, *a.size)
        self.weight = 1.0 / int(self.sample.loss_mask.sum())
        self.model.train()
        self.shape = flop_shape(self.model, self.sample)

    def run(self) -> dict[str, float]:
        terms = self.learner._sample_terms(self.sample, self.weight)
        self.model.zero_grad(set_to_none=True)
        return terms

    def timed(self, repeats: int, warmups: int = 1) -> float:
        for _ in range(warmups):
            self.run()
        times = []
        for _ in range(repeats):
            _sync()
            start = time.perf_counter()
            self.run()
            _sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def figures(self, seconds: float, vision_ckpt: float | None = None) -> dict[str, Any]:
        v = self.vision_ckpt if vision_ckpt is None else vision_ckpt
        tokens = len(self.sample.input_ids)
        hardware = train_flops(self.shape, self.text_ckpt, v)
        model_flops = train_flops(self.shape, 0.0, 0.0)
        return {
            "seconds": round(seconds, 4),
            "tokens_per_second": round(tokens / seconds),
            "tflops": round(hardware / seconds / 1e12, 1),
            "model_tflops": round(model_flops / seconds / 1e12, 1),
        }


@contextmanager
def phase_hooks(model: Any, mark: Callable[[str], None]) -> Iterator[None]:
    """mark(name) at each phase boundary: the vision tower's start and end, the text model's start
    and end, the gradient reaching the text model's output (its backward starts) and the vision
    tower's output (its backward starts)."""
    inner = model.model
    visual, text = inner.visual, inner.language_model
    handles = []

    def grad_mark(name: str) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            mark(name)

        return hook

    def after_visual(_m: Any, _i: Any, out: Any) -> None:
        mark("vision_end")
        pooled = out.pooler_output if hasattr(out, "pooler_output") else out
        if pooled.requires_grad:
            pooled.register_hook(grad_mark("vision_bwd_start"))

    def after_text(_m: Any, _i: Any, out: Any) -> None:
        mark("text_end")
        if out.last_hidden_state.requires_grad:
            out.last_hidden_state.register_hook(grad_mark("text_bwd_start"))

    handles.append(visual.register_forward_pre_hook(lambda *_: mark("vision_start")))
    handles.append(visual.register_forward_hook(after_visual))
    handles.append(text.register_forward_pre_hook(lambda *_: mark("text_start")))
    handles.append(text.register_forward_hook(after_text))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


ORDER = ("vision_start", "vision_end", "text_start", "text_end", "text_bwd_start",
         "vision_bwd_start", "end")  # fmt: skip


def phase_seconds(b: Bench) -> dict[str, float]:
    """Seconds of each phase of one run, by CUDA events at the boundaries (the host clock on the
    CPU smoke)."""
    marks: dict[str, Any] = {}

    def mark(name: str) -> None:
        if b.gpu:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks[name] = e
        else:
            marks[name] = time.perf_counter()

    def seconds(a: str, z: str) -> float:
        if b.gpu:
            return round(marks[a].elapsed_time(marks[z]) / 1e3, 4)
        return round(marks[z] - marks[a], 4)

    with phase_hooks(b.model, mark):
        _sync()
        b.run()
        mark("end")
    _sync()
    missing = [n for n in ORDER if n not in marks]
    if missing:
        return {"missing_marks": missing}  # type: ignore[dict-item]
    out = {phase: seconds(a, z) for phase, a, z in zip(PHASES, ORDER[:-1], ORDER[1:], strict=True)}
    return out | {"total": seconds("vision_start", "end")}


def profile_run(b: Bench) -> dict[str, Any]:
    """One run under torch.profiler: GPU kernel seconds by kind, per phase (marker kernels from the
    phase hooks), the top kernels, and the GPU's idle share of the run."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if b.gpu else [])

    def mark(_: str) -> None:  # a short spin kernel, found by its name in the trace
        if b.gpu:
            torch.cuda._sleep(1000)
        else:  # the CPU smoke: an annotation of the same name
            with torch.profiler.record_function("spin_kernel"):
                pass

    _sync()
    with profile(activities=acts) as prof, phase_hooks(b.model, mark):
        b.run()
        mark("end")
        _sync()
    kernels = []
    for e in prof.events():
        if b.gpu and e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        nested = e.cpu_parent is not None and kind_of(e.name) != "marker"
        if not b.gpu and (nested or e.name.startswith("ProfilerStep")):
            continue  # the CPU smoke: top-level operators (and the markers) only
        tr = e.time_range
        kernels.append((tr.start, tr.end, e.name))
    kernels.sort()
    if not kernels:
        return {"kernels": 0}
    markers = [k for k in kernels if kind_of(k[2]) == "marker"]
    bounds = [m[0] for m in markers]
    names = PHASES if len(bounds) == len(ORDER) else ()
    by_kind: dict[str, float] = defaultdict(float)
    by_phase: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    busy, last_end = 0.0, kernels[0][0]
    for start, end, name in kernels:
        kind = kind_of(name)
        if kind == "marker":
            continue
        us = end - start
        by_kind[kind] += us
        by_name[name][0] += us
        by_name[name][1] += 1
        if names:
            i = max(0, min(len(names) - 1, sum(1 for t in bounds[1:] if t <= start)))
            by_phase[names[i]][kind] += us
        busy += max(0.0, end - max(start, last_end))  # union of kernel intervals
        last_end = max(last_end, end)
    wall = kernels[-1][1] - kernels[0][0]
    total = sum(by_kind.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:25]
    return {
        "kernels": len(kernels),
        "kernel_seconds": round(total / 1e6, 4),
        "wall_seconds": round(wall / 1e6, 4),
        "gpu_idle_share": round(1 - busy / max(wall, 1e-9), 4),
        "by_kind": {
            k: {"seconds": round(v / 1e6, 4), "share": round(v / total, 4)}
            for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])
        },
        "by_phase": {
            p: {k: round(v / 1e6, 4) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}
            for p, kinds in by_phase.items()
        },
        "phases_found": list(names),
        "top_kernels": [
            {"name": n[:160], "seconds": round(s / 1e6, 4), "calls": c, "kind": kind_of(n)}
            for n, (s, c) in top
        ],
    }


def prefetch_steps(b: Bench, images: int, size: tuple[int, int]) -> dict[str, Any]:
    """Learner.step over 3 samples (torch's AdamW on the bf16 weights) with the next sample's
    pixels prefetched (speedups/prefetch.py) and without: seconds of each, alternating, after a
    warm-up step (which creates the AdamW state)."""
    samples = [synthetic_sample(b.model, images, *size, seed=i) for i in range(3)]
    learner = Learner(b.policy, ALGO)
    learner.step(samples)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for enabled in (False, True, False, True):
        learner.prefetch.enabled = enabled
        _sync()
        start = time.perf_counter()
        learner.step(samples)
        _sync()
        seconds[enabled].append(time.perf_counter() - start)
    del learner
    b.model.zero_grad(set_to_none=True)
    off, on = (statistics.mean(seconds[k]) for k in (False, True))
    return {"off_seconds": [round(x, 4) for x in seconds[False]],
            "on_seconds": [round(x, 4) for x in seconds[True]],
            "speedup": round(off / on, 4), "peak_gib": _peak()}  # fmt: skip


def sdpa_backends(b: Bench, repeats: int) -> dict[str, Any]:
    """The text attention alone on this sample's length (causal, GQA as the model's config, bf16):
    forward+backward seconds per backend, and each backend's output against an fp32 reference
    (max and mean |difference|; the same inputs and output gradient for all)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = b.model.config.text_config
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    t = len(b.sample.input_ids)
    gen = torch.Generator(device=b.device).manual_seed(0)

    def rand(h: int) -> torch.Tensor:
        x = torch.randn(1, h, t, dim, device=b.device, generator=gen, dtype=torch.bfloat16)
        return x.requires_grad_()

    q, k, v = rand(heads), rand(kv), rand(kv)
    grad_out = torch.randn(1, heads, t, dim, device=b.device, generator=gen, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True
        )
    out: dict[str, Any] = {"tokens": t, "heads": heads, "kv_heads": kv, "head_dim": dim}
    flops = 4 * t * t * dim * heads / 2 * 3.5  # causal: half; backward 2.5x the forward
    # (name, backend, GQA in the kernel; else the key/value heads repeated first, as
    # transformers does where SDPA's enable_gqa is not used)
    for name, backend, gqa in (("flash", SDPBackend.FLASH_ATTENTION, True),
                               ("cudnn", SDPBackend.CUDNN_ATTENTION, True),
                               ("cudnn_repeated_kv", SDPBackend.CUDNN_ATTENTION, False),
                               ("efficient", SDPBackend.EFFICIENT_ATTENTION, True)):  # fmt: skip

        def run(backend: Any = backend, gqa: bool = gqa) -> torch.Tensor:
            kk, vv = (k, v) if gqa else (x.repeat_interleave(heads // kv, 1) for x in (k, v))
            with sdpa_kernel([backend]):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, kk, vv, is_causal=True, enable_gqa=gqa
                )
            o.backward(grad_out)
            q.grad = k.grad = v.grad = None
            return o.detach()

        try:
            o = run()
            times = []
            for _ in range(repeats + 2):
                _sync()
                start = time.perf_counter()
                run()
                _sync()
                times.append(time.perf_counter() - start)
            sec = statistics.median(times)
            diff = (o.float() - ref).abs()
            out[name] = {"seconds": round(sec, 5), "tflops": round(flops / sec / 1e12, 1),
                         "max_abs_vs_fp32": float(diff.max()),
                         "mean_abs_vs_fp32": float(diff.mean())}  # fmt: skip
        except RuntimeError as e:  # the backend refuses these inputs
            out[name] = {"result": str(e).splitlines()[0][:200]}
    return out


def grads_of(b: Bench) -> tuple[torch.Tensor, dict[str, float]]:
    """The trained tokens' log-probs (no grad) and, from one forward+backward, the loss, the
    gradient norm and a few parameters' gradients (flattened, fp32) to compare backends."""
    with torch.no_grad(), b.policy.autocast():
        logp, _ = token_logprobs(b.policy, b.sample, b.sample.temperature)
    terms = b.learner._sample_terms(b.sample, b.weight)
    params = dict(b.model.named_parameters())
    picks = [n for n in params if n.endswith("layers.0.self_attn.q_proj.weight")]
    picks += [n for n in params if n.endswith("layers.35.mlp.down_proj.weight")]
    picks += [n for n in params if n.endswith("blocks.0.attn.qkv.weight")]
    norm = torch.sqrt(sum(p.grad.float().square().sum() for p in params.values()
                          if p.grad is not None))  # fmt: skip
    got = {"loss": terms["loss"], "grad_norm": float(norm)}
    grads = [params[n].grad for n in picks]
    flat = torch.cat([g.float().flatten() for g in grads if g is not None])
    b.model.zero_grad(set_to_none=True)
    return torch.cat([logp.float().flatten(), flat]), got | {"n_logp": float(len(logp))}


def compare(x: tuple[torch.Tensor, dict], y: tuple[torch.Tensor, dict]) -> dict[str, Any]:
    """Max |d log-prob|, the compared gradients' relative L2 difference, and the gradient norms."""
    n = int(x[1]["n_logp"])
    lx, ly, gx, gy = x[0][:n], y[0][:n], x[0][n:], y[0][n:]
    return {
        "max_abs_logprob_diff": float((lx - ly).abs().max()) if n else 0.0,
        "mean_abs_logprob_diff": float((lx - ly).abs().mean()) if n else 0.0,
        "grad_rel_l2_diff": float((gx - gy).norm() / gy.norm().clamp_min(1e-30)),
        "grad_norms": [round(x[1]["grad_norm"], 6), round(y[1]["grad_norm"], 6)],
        "losses": [x[1]["loss"], y[1]["loss"]],
    }


def optimizer_step(b: Bench, repeats: int) -> dict[str, Any]:
    """MasterAdamW with its fp32 masters and moments on the GPU (offload off): seconds of gradient
    clipping and one update of every parameter, over the gradients of one forward+backward (the
    first step creates the state and is not timed)."""
    from kubecua_trainer.speedups.optimizer import MasterAdamW

    params = [p for p in b.model.parameters() if p.requires_grad]
    opt = MasterAdamW(params, lr=1e-6, offload=False)
    b.learner._sample_terms(b.sample, b.weight)
    times = []
    for i in range(repeats + 1):
        _sync()
        start = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        _sync()
        if i:
            times.append(time.perf_counter() - start)
    opt.zero_grad(set_to_none=True)
    out = {"seconds": round(statistics.median(times), 4), "peak_gib": _peak(),
           "parameters": sum(p.numel() for p in params)}  # fmt: skip
    del opt
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=1e9, help="skip stages started after this")
    p.add_argument("--vision", default="0.5,0.0", help="vision checkpointing fractions to time")
    p.add_argument(
        "--skip", default="", help="stages to leave out: pixels,prefetch,optimizer,sdpa,cudnn"
    )
    p.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    p.add_argument("--cap", action="store_true", help="cap the allocator as bench-trainer does")
    a = p.parse_args()
    gpu = torch.cuda.is_available() and not a.smoke
    a.model = "qwen2_5_vl_3b" if gpu else "tiny_qwen2_5_vl"
    a.images, a.size = (8, (1260, 700)) if gpu else (2, (112, 112))
    a.text_ckpt, a.vision_ckpt = 0.0, 1.0
    began = time.monotonic()
    cap = cap_memory() if gpu and a.cap else None
    doc: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "smoke": not gpu,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "memory_cap_gib": cap,
        "stages": {},
    }
    stages = doc["stages"]

    def save(name: str, value: Any) -> None:
        stages[name] = value
        print(f"{name} ({time.monotonic() - began:.0f} s): {json.dumps(value)}", file=sys.stderr,
              flush=True)  # fmt: skip
        if a.out:
            Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")

    def time_left() -> bool:
        return time.monotonic() - began < a.budget_s

    b = Bench(a, gpu)
    doc["workload"] = {"model": a.model, "images": a.images, "size": list(a.size),
                       "tokens": len(b.sample.input_ids), "patches": b.shape.patches,
                       "trained_tokens": int(b.sample.loss_mask.sum()), "fast_paths": b.fast,
                       "text_ckpt": a.text_ckpt, "vision_ckpt": a.vision_ckpt}  # fmt: skip
    start = time.monotonic()
    b.run()
    b.run()  # compile: the first calls trace the forward, backward and recompute graphs
    warm = time.monotonic() - start
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    base = b.timed(a.repeats, warmups=0)
    save("baseline", b.figures(base) | {"peak_gib": _peak(), "warmup_seconds": round(warm, 1)})
    save("phases", phase_seconds(b))
    save("profile", profile_run(b))
    for fraction in [float(x) for x in a.vision.split(",") if x]:
        if not time_left():
            break
        set_checkpointing(b.model, a.text_ckpt, fraction)
        if gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            seconds = b.timed(a.repeats)
            save(f"vision_ckpt_{fraction:g}", b.figures(seconds, fraction) | {"peak_gib": _peak()})
        except torch.OutOfMemoryError:
            b.model.zero_grad(set_to_none=True)
            save(f"vision_ckpt_{fraction:g}", {"result": "out of memory", "peak_gib": _peak()})
    set_checkpointing(b.model, a.text_ckpt, a.vision_ckpt)
    if gpu:
        torch.cuda.empty_cache()
    skip = set(a.skip.split(","))
    pixels = b.sample.pixel_values
    if "pixels" not in skip and time_left() and pixels is not None:
        # the screenshots' pixels already on the GPU: what their copy at the start of each
        # forward costs (pageable fp32, before any kernel of the sample can run)
        on_host = b.sample
        b.sample = dataclasses.replace(on_host, pixel_values=pixels.to(b.device))
        mib = round(pixels.numel() * pixels.element_size() / 2**20)
        save("pixels_on_gpu", b.figures(b.timed(a.repeats)) | {"pixel_mib": mib})
        b.sample = on_host
    if "prefetch" not in skip and time_left() and gpu:
        save("prefetch", prefetch_steps(b, a.images, a.size))
        if gpu:
            torch.cuda.empty_cache()
    if "optimizer" not in skip and time_left():
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        try:
            save("optimizer_on_gpu", optimizer_step(b, 2))
        except torch.OutOfMemoryError:
            save("optimizer_on_gpu", {"result": "out of memory", "peak_gib": _peak()})
        b.model.zero_grad(set_to_none=True)
        if gpu:
            torch.cuda.empty_cache()
    if "sdpa" not in skip and time_left():
        save("sdpa_backends", sdpa_backends(b, a.repeats))
        if gpu:
            torch.cuda.empty_cache()
    if "cudnn" not in skip and time_left():
        flash = grads_of(b)
        flash_again = grads_of(b)
        with text_attention("cudnn"):  # around the forward, the backward and the re-trace
            torch._dynamo.reset()  # the compiled layers chose their SDPA kernel when traced
            start = time.monotonic()
            b.run()
            b.run()
            warm = time.monotonic() - start
            if gpu:
                torch.cuda.reset_peak_memory_stats()
            seconds = b.timed(a.repeats, warmups=0)
            result = b.figures(seconds) | {"peak_gib": _peak(), "warmup_seconds": round(warm, 1)}
            cudnn = grads_of(b)
            prof = profile_run(b)
        save(
            "cudnn_text_attention",
            result
            | {
                "attention_kinds": {
                    k: v for k, v in prof.get("by_kind", {}).items() if k.startswith("attention")
                },
                "vs_flash": compare(cudnn, flash),
                "flash_vs_flash": compare(flash_again, flash),
            },
        )
    doc["seconds"] = round(time.monotonic() - began, 1)
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
