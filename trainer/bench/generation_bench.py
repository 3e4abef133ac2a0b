"""`make bench-generation`: embedded generation, plain generate() against the continuous engine.

What it does: builds a Qwen2.5-VL-3B-shaped model with random weights (no download; fp32
parameters under bf16 autocast, the trainer's default precision on a GPU) and plays E episodes of
T turns in the trajectory layout: each turn adds a user turn with one 1280x720 screenshot (1,196
image tokens) to the episode's prompt, and each reply is exactly N sampled tokens (no stop ids, so
every path does the same work). The same prompts go to
- plain: the old static path, generate_batch in engines/embedded/static.py (transformers
  generate() on the batch of E prompts, each prompt recomputed in full every turn); its prefill
  time is measured by a separate max_new_tokens=1 run of the same batch, decode time is the rest;
- engine: HFEngine (engines/embedded/), each episode an independent coroutine: continuous
  batching, and KV reuse so a turn prefills only its new tokens;
- engine_graphs: the same with HFEngine(cuda_graphs=True), the decode step replayed from CUDA
  graphs (eager on the CPU), joining requests prefilled packed in one row;
- engine_graphs_padded: the same with the joining requests right-padded to one length (the
  prefill before issue 31).
Prints one JSON document: per path the prompt tokens, prefilled tokens, screenshots encoded,
prefill and decode seconds and tokens/s apart, generated tokens/s over the whole run, peak GiB,
and the agreement of the behaviour log-probs with the learner's recomputation
(logprobs.token_logprobs) on one episode; then each engine's speed-up over plain. Without a GPU,
or with --smoke, it runs a toy-width model on 112x112 screenshots and says the figures mean
nothing.
How to run: `make bench-generation` (GPU machine: `cd trainer && PYTHONPATH=. python3 -m
bench.generation_bench --out /tmp/generation.json`); `--smoke` on the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import AutoConfig, AutoModelForImageTextToText
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from bench.shapes import CONFIGS, TOKEN_IDS
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.embedded.static import generate_batch
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy
from kubecua_trainer.speedups.fast_paths import apply_fast_paths
from kubecua_trainer.tokens import Sample

IM_START, IM_END, NEWLINE, PAD = 151644, 151645, 198, 151643
MEMORY_CAP_GIB = 78.0  # as bench/learner_bench.py: an H100's share, also on a larger GPU


def build_policy(name: str, device: torch.device, dtype: str) -> Policy:
    """Random weights of the named shape. dtype auto: fp32 parameters, bf16 autocast on CUDA."""
    params = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    spec = dict(CONFIGS[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec, **TOKEN_IDS)
    with torch.device(device):
        model: Any = AutoModelForImageTextToText.from_config(
            config, dtype=params, attn_implementation="sdpa"
        )
    if device.type == "cuda":
        apply_fast_paths(model)
    model.config.use_cache = False
    model.eval()
    compute = torch.bfloat16 if device.type == "cuda" else params
    processor = SimpleNamespace(image_processor=Qwen2VLImageProcessorPil())
    return Policy(model, processor, SimpleNamespace(pad_token_id=PAD), device, compute)


class Episode:
    """Token ids in the Qwen-VL chat layout with random text, and the screenshots so far."""

    def __init__(self, seed: int, size: tuple[int, int], pads: int):
        self.rng = np.random.default_rng(seed)
        self.size, self.pads = size, pads
        self.ids = [IM_START, *self._text(20), IM_END, NEWLINE]
        self.images: list[Image.Image] = []
        self.replies: list[tuple[int, list[float]]] = []  # (where a reply starts, its log-probs)

    def _text(self, n: int) -> list[int]:
        return self.rng.integers(0, 151000, n).tolist()

    def add_user(self) -> None:
        w, h = self.size
        pixels = self.rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        self.images.append(Image.fromarray(pixels, "RGB"))
        self.ids += [IM_START, *self._text(20), TOKEN_IDS["vision_start_token_id"]]
        self.ids += [TOKEN_IDS["image_token_id"]] * self.pads
        self.ids += [TOKEN_IDS["vision_end_token_id"], IM_END, NEWLINE, IM_START, *self._text(2)]

    def add_reply(self, gen: Generation) -> None:
        self.replies.append((len(self.ids), list(gen.logprobs)))
        self.ids += [*gen.token_ids, IM_END, NEWLINE]

    def sample(self, policy: Policy) -> Sample:
        """The whole episode as the learner sees it (behaviour log-probs on the replies)."""
        ids = torch.tensor(self.ids)
        mask = torch.zeros(len(ids), dtype=torch.bool)
        behaviour = torch.zeros(len(ids))
        for at, lps in self.replies:
            mask[at : at + len(lps)] = True
            behaviour[at : at + len(lps)] = torch.tensor(lps)
        proc = policy.processor.image_processor(images=self.images, return_tensors="pt")
        return Sample(ids, mask, behaviour, proc["pixel_values"], proc["image_grid_thw"])


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _peak_gib() -> float | None:
    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 1)


def _agreement(policy: Policy, episode: Episode) -> dict[str, float]:
    """|behaviour - learner| log-probs over one episode's sampled tokens (same weights)."""
    sample = episode.sample(policy)
    with torch.no_grad(), policy.autocast():
        logp, _ = token_logprobs(policy, sample, temperature=1.0)
    diff = (logp.float().cpu() - sample.behaviour_logprobs[sample.loss_mask]).abs()
    return {"logprob_max_abs_diff": float(diff.max()), "logprob_mean_abs_diff": float(diff.mean())}


def run_plain(policy: Policy, a: argparse.Namespace, sampling: SamplingParams) -> dict[str, Any]:
    """The static path: one generate() batch per turn over every episode's full prompt."""
    episodes = [Episode(e, a.size, a.pads) for e in range(a.episodes)]
    prefill_s = total_s = 0.0
    prompt_tokens = generated = 0
    first = SamplingParams(sampling.temperature, sampling.top_p, 1, sampling.stop_token_ids)
    for _ in range(a.turns):
        for ep in episodes:
            ep.add_user()
        prompt_tokens += sum(len(ep.ids) for ep in episodes)
        batch: Any = [SimpleNamespace(prompt_ids=ep.ids, images=ep.images, sampling=first)
                      for ep in episodes]  # fmt: skip
        _sync()
        start = time.perf_counter()
        generate_batch(policy, batch)  # the prefill alone (and one sampled token)
        _sync()
        prefill_s += time.perf_counter() - start
        for r in batch:
            r.sampling = sampling
        start = time.perf_counter()
        gens = generate_batch(policy, batch)
        _sync()
        total_s += time.perf_counter() - start
        for ep, g in zip(episodes, gens, strict=True):
            ep.add_reply(g)
            generated += len(g.token_ids)
    decode_s = max(total_s - prefill_s, 1e-9)
    return {
        "prompt_tokens": prompt_tokens,
        "prefilled_tokens": prompt_tokens,
        "images_encoded": a.episodes * a.turns * (a.turns + 1) // 2,
        "prefill_seconds": round(prefill_s, 3),
        "prefill_tokens_per_second": round(prompt_tokens / prefill_s),
        "generated_tokens": generated,
        "decode_seconds": round(decode_s, 3),
        "decode_tokens_per_second": round((generated - a.episodes * a.turns) / decode_s, 1),
        "total_seconds": round(total_s, 3),
        "tokens_per_second": round(generated / total_s, 1),
        "peak_gib": _peak_gib(),
        **_agreement(policy, episodes[0]),
    }


def run_engine(
    policy: Policy, a: argparse.Namespace, sampling: SamplingParams, graphs: bool = False,
    packed: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """The continuous engine: every episode its own coroutine, turns back to back."""
    episodes = [Episode(e, a.size, a.pads) for e in range(a.episodes)]

    async def play(engine: HFEngine, ep: Episode) -> None:
        for _ in range(a.turns):
            ep.add_user()
            ep.add_reply(await engine.generate(list(ep.ids), list(ep.images), sampling))

    async def run() -> HFEngine:
        engine = HFEngine(
            policy, max_batch_size=a.episodes, cache_bytes=a.cache_gib << 30, cuda_graphs=graphs,
            packed_prefill=packed,
        )  # fmt: skip
        await asyncio.gather(*(play(engine, ep) for ep in episodes))
        await engine.close()
        return engine

    _sync()
    start = time.perf_counter()
    engine = asyncio.run(run())
    _sync()
    total_s = time.perf_counter() - start
    b = engine.scheduler
    assert b is not None
    graph = b.runner.graphs
    records = list(engine.records)
    generated = engine.tokens_generated
    decode_tokens = generated - len(records)  # each request's first id comes from its prefill
    return {
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "prefilled_tokens": b.prefill_tokens,
        "reused_tokens": b.reused_tokens,
        "images_encoded": sum(r.images_encoded for r in records),
        "prefill_seconds": round(b.prefill_seconds, 3),
        "prefill_tokens_per_second": round(b.prefill_tokens / max(b.prefill_seconds, 1e-9)),
        "generated_tokens": generated,
        "decode_steps": b.steps,
        "mean_decode_batch": round(decode_tokens / max(b.steps, 1), 2),
        "decode_seconds": round(b.decode_seconds, 3),
        "decode_tokens_per_second": round(decode_tokens / max(b.decode_seconds, 1e-9), 1),
        "total_seconds": round(total_s, 3),
        "tokens_per_second": round(generated / total_s, 1),
        "peak_gib": _peak_gib(),
        **_agreement(policy, episodes[0]),
        **(
            {"graph_captures": graph.captures, "graphs_failed": graph.broken}
            if graph is not None
            else {}
        ),
    }


def run_engine_graphs(
    policy: Policy, a: argparse.Namespace, sampling: SamplingParams
) -> dict[str, Any]:
    """The same with the decode step replayed from CUDA graphs (HFEngine(cuda_graphs=True))."""
    return run_engine(policy, a, sampling, graphs=True)


def run_engine_graphs_padded(
    policy: Policy, a: argparse.Namespace, sampling: SamplingParams
) -> dict[str, Any]:
    """Graphs, with the joining requests' prefill right-padded to one length (the reference the
    packed prefill replaced, issue 31 item 3)."""
    return run_engine(policy, a, sampling, graphs=True, packed=False)


PATHS: dict[str, Callable[[Policy, argparse.Namespace, SamplingParams], dict[str, Any]]] = {
    "plain": run_plain,
    "engine": run_engine,
    "engine_graphs": run_engine_graphs,
    "engine_graphs_padded": run_engine_graphs_padded,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="toy model on the CPU")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16"])
    parser.add_argument(
        "--only", default=",".join(PATHS), help="paths to run, of " + ",".join(PATHS)
    )
    parser.add_argument("--cache-gib", type=int, default=16, help="the engine's KV store bound")
    parser.add_argument("--out", default="", help="also write the JSON here")
    a = parser.parse_args(argv)
    unknown = set(a.only.split(",")) - set(PATHS)
    if unknown:
        parser.error(f"--only: unknown path(s) {sorted(unknown)}; known: {list(PATHS)}")
    gpu = torch.cuda.is_available() and not a.smoke
    device = torch.device("cuda" if gpu else "cpu")
    if not gpu:
        a.episodes, a.turns, a.new_tokens = min(a.episodes, 2), min(a.turns, 2), 8
        a.width, a.height = 112, 112
    else:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, MEMORY_CAP_GIB * 2**30 / total))
    name = "qwen2_5_vl_3b" if gpu else "tiny_qwen2_5_vl"
    torch.manual_seed(0)
    policy = build_policy(name, device, a.dtype)
    # The processor's resize: multiples of 28, so 1280x720 becomes 1288x728 (1, 52, 92) -> 1,196.
    a.size = (round(a.width / 28) * 28, round(a.height / 28) * 28)
    a.pads = a.size[0] * a.size[1] // 28**2
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=a.new_tokens)
    warm = argparse.Namespace(**{**vars(a), "episodes": 2, "turns": 2, "new_tokens": 4})
    results: dict[str, Any] = {}
    for path, fn in PATHS.items():
        if path not in a.only.split(","):
            continue
        try:  # one failing path (e.g. a graph capture) must not lose the others' figures
            fn(policy, warm, SamplingParams(max_new_tokens=4))  # kernels, allocator, autotuning
            if gpu:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            results[path] = fn(policy, a, sampling)
        except Exception as err:  # reported in the JSON instead
            results[path] = {"error": f"{type(err).__name__}: {err}"[:500]}
        print(json.dumps({path: results[path]}), flush=True)
    doc: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "smoke": not gpu,
        "note": "" if gpu else "toy-width model on the CPU: a smoke run; the figures mean nothing",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": name,
        "dtype": a.dtype,
        "episodes": a.episodes,
        "turns": a.turns,
        "new_tokens_per_turn": a.new_tokens,
        "screenshot": f"{a.width}x{a.height} -> {a.size[0]}x{a.size[1]} ({a.pads} tokens)",
        **results,
    }
    if "tokens_per_second" in results.get("plain", {}):
        base = results["plain"]["tokens_per_second"]
        doc["speedup_tokens_per_second"] = {
            k: round(r["tokens_per_second"] / base, 2)
            for k, r in results.items()
            if k != "plain" and "tokens_per_second" in r
        }
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return doc


if __name__ == "__main__":
    main()
