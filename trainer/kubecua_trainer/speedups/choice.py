"""The learner's speed-ups chosen at start-up where the spec leaves them unset (issue 31 item 1):
torch.compile, activation checkpointing and the optimizer's offload, from the model's shape, the
largest sample's token count and the GPU's memory. What the user sets explicitly wins.

Why: the loop's learner ran at 3,884 tokens/s with the old defaults (no compile, every layer
checkpointed) while `make bench-trainer` measured 9,917 with compile and no text checkpointing on
the same card (docs/benchmarks.md). The fastest setting that fits is the right default; what fits
depends on the model and the sample, so it is estimated, not fixed.

The estimate (bytes on one GPU, for the largest sample; the learner runs one sample at a time):
weights and gradients at the parameters' width (sharded over the world under FSDP2), AdamW's
state unless offloaded, a reserve for the engine (its KV store and CUDA-graph weight copy), and
activations per token and layer: a checkpointed layer keeps its input (2 x hidden bytes in bf16),
an unchecked one about 2 x (8 x hidden + 2.5 x intermediate) bytes (fitted to the 3B learner's
52.9 GiB peak on 8 x 720p GRPO trajectories, docs/benchmarks.md), the vision blocks the same on
4 patches per image token. Text checkpointing is the smallest of 0, 1/4, 1/2, 3/4, 1 that fits,
then, once no text layer is checkpointed, the smallest vision fraction that fits (VISION_BY_MEMORY,
the default; without it vision stays fully checkpointed: its activations are 4x the tokens').
Offload: with bf16 parameters (fp32 masters) when the masters and moments (12 bytes a parameter)
would take more than a quarter of the GPU; it depends on the card's total memory only, so a resumed
run makes the same choice and reads the same optimizer state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

GIB = 2**30
TEXT_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
VISION_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
# Issue 46: with the text layers unchecked, checkpoint only as many vision blocks as the estimate
# needs (each unchecked block saves its recompute, about 1/32 of the tower's forward). On by
# default since `python3 -m bench.learner_profile` on one H200 (2026-11-29, docs/benchmarks.md):
# the loop's worst-case sample (8 x 1260x700, 9,976 tokens) took 1.201 s forward+backward with all
# 32 blocks checkpointed (vision backward with its recompute was 0.60 s of it), 1.117 s with 16 and
# 1.020 s with none (-15%), peaks 43.8, 67.2 and 90.6 GiB, against this estimate's 47.4, 66.1 and
# 83.7 GiB without the engine's reserve: within the 20% HEADROOM. bench-loop --no-vision-by-memory
# runs the old setting.
VISION_BY_MEMORY = True
HEADROOM = 0.8  # of the budget: the allocator's fragmentation and the estimate's error
ENGINE_RESERVE = 4 * GIB  # the embedded engine's prefix store bound (HFEngine cache_bytes)


@dataclass(frozen=True)
class Shape:
    """What the estimate needs of a model config (shape_of reads it)."""

    params: int
    text_layers: int
    hidden: int
    intermediate: int
    vision_blocks: int = 0
    vision_hidden: int = 0
    vision_intermediate: int = 0


@dataclass(frozen=True)
class Workload:
    tokens: int  # the largest sample's tokens
    image_tokens: int  # of which image tokens (each 4 vision patches)
    param_bytes: int  # 2 (bfloat16 parameters) or 4 (fp32)
    cuda: bool
    total_bytes: int = 0  # the GPU's memory (0 on the CPU)
    world: int = 1  # FSDP2 ranks sharing the weights, gradients and optimizer state
    engine_copy: bool = False  # the engine holds its own bf16 copy (staleness > 0, FSDP2)


@dataclass(frozen=True)
class Choice:
    compile: bool
    text_checkpointing: float
    vision_checkpointing: float
    optimizer_offload: bool
    estimate_gib: float
    budget_gib: float
    why: str


def shape_of(config: Any, params: int) -> Shape:
    text = config.get_text_config()
    vision = getattr(config, "vision_config", None)
    return Shape(
        params=params,
        text_layers=text.num_hidden_layers,
        hidden=text.hidden_size,
        intermediate=text.intermediate_size,
        vision_blocks=getattr(vision, "depth", 0) if vision is not None else 0,
        vision_hidden=getattr(vision, "hidden_size", 0) if vision is not None else 0,
        vision_intermediate=getattr(vision, "intermediate_size", 0) if vision is not None else 0,
    )


def sample_tokens(max_turns: int, max_pixels: int, max_new_tokens: int, images: int) -> int:
    """Tokens of the largest sample: `images` screenshots of max_pixels (28 x 28 pixels a token
    after Qwen-VL's 2 x 2 merge), every turn's reply and about 64 tokens of user text a turn, and
    a 256-token system prompt.

    Example: 8 turns, 1280x720 cap (921,600 pixels), 32 new tokens, 8 images -> 10,432."""
    return images * (max_pixels // 784) + max_turns * (max_new_tokens + 64) + 256


def _activations(s: Shape, w: Workload, text: float, vision: float) -> float:
    def stack(layers: int, hidden: int, inter: int, tokens: int, fraction: float) -> float:
        kept = round(layers * fraction)
        full = 2 * (8 * hidden + 2.5 * inter) * tokens
        return kept * 2 * hidden * tokens + (layers - kept) * full + (full if kept else 0)

    patches = 4 * w.image_tokens
    return stack(s.text_layers, s.hidden, s.intermediate, w.tokens, text) + stack(
        s.vision_blocks, s.vision_hidden, s.vision_intermediate, patches, vision
    )


def estimate(s: Shape, w: Workload, text: float, vision: float, offload: bool) -> float:
    """Peak bytes on one GPU for the largest sample's forward and backward."""
    sharded = s.params * w.param_bytes * 2 / w.world  # weights and gradients
    optimizer = 0 if offload else s.params * (12 if w.param_bytes == 2 else 8) / w.world
    engine = ENGINE_RESERVE + (s.params * 2 if w.engine_copy or w.param_bytes == 4 else 0)
    logits = w.tokens * 4 * 4  # the learner's per-token log-prob and entropy buffers
    return sharded + optimizer + engine + logits + _activations(s, w, text, vision)


def choose(
    s: Shape,
    w: Workload,
    compile_: bool | None = None,
    checkpointing: bool | None = None,
    offload: bool | None = None,
    vision_by_memory: bool | None = None,
) -> Choice:
    """The learner's settings; an explicit compile_/checkpointing/offload (not None) wins.
    vision_by_memory (default VISION_BY_MEMORY): fewer checkpointed vision blocks where the
    estimate allows, once no text layer is checkpointed."""
    if vision_by_memory is None:
        vision_by_memory = VISION_BY_MEMORY
    budget = w.total_bytes * HEADROOM
    why = []
    if offload is None:
        masters = s.params * 12 / w.world
        offload = w.cuda and w.param_bytes == 2 and masters > w.total_bytes / 4
        why.append(f"offload {'on' if offload else 'off'} (fp32 masters {masters / GIB:.1f} GiB)")
    if compile_ is None:
        compile_ = w.cuda
        why.append(f"compile {'on' if compile_ else 'off'} ({'CUDA' if w.cuda else 'no CUDA'})")
    if checkpointing is not None:
        text = vision = 1.0 if checkpointing else 0.0
    elif not w.cuda:
        text = vision = 1.0  # no memory figure to go by: the memory-safe setting
        why.append("checkpointing every layer (no GPU)")
    else:
        vision = 1.0
        fits = [f for f in TEXT_FRACTIONS if estimate(s, w, f, vision, offload) <= budget]
        text = fits[0] if fits else 1.0
        if vision_by_memory and text == 0.0 and s.vision_blocks:  # then as few as fit
            vision = next(v for v in VISION_FRACTIONS if estimate(s, w, 0.0, v, offload) <= budget)
        why.append(
            f"text checkpointing {text:g} of {s.text_layers} layers, vision {vision:g} of "
            f"{s.vision_blocks} blocks for {w.tokens} tokens"
            + ("" if fits else " (the estimate exceeds the budget even so)")
        )
    return Choice(
        compile=compile_,
        text_checkpointing=text,
        vision_checkpointing=vision,
        optimizer_offload=offload,
        estimate_gib=round(estimate(s, w, text, vision, offload) / GIB, 1),
        budget_gib=round(budget / GIB, 1),
        why="; ".join(why) or "all set in the spec",
    )
