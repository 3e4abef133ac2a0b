"""Load the policy (a Qwen2.5-VL or Qwen3-VL) from a local HF directory, never from the hub.

The Policy is shared by the learner and the embedded hf engine: one module, so weights never need
a sync. `lock` serialises the two (generation in the engine's worker thread, training steps), and
makes its next holder wait for an optimizer update still running after a step (weights_lock.py).
Precision (model.dtype): `auto` on GPU keeps fp32 parameters (AdamW's master weights) and runs the
forward under bf16 autocast; `bfloat16` stores the parameters themselves in bf16 (pure bf16: about
half the memory, coarser updates; a 3B model's weights + AdamW state go from ~45 to ~22 GiB);
`float32`, and `auto` on CPU, is fp32 throughout.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from kubecua_trainer.speedups.fast_paths import apply_fast_paths
from kubecua_trainer.weights_lock import WeightsLock


@dataclass
class Policy:
    """The learner's model + processor, shared with the hf engine."""

    model: torch.nn.Module
    processor: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype  # compute dtype: bf16 autocast on GPU, fp32 on CPU
    # an RLock that also waits for a deferred optimizer update (weights_lock.py)
    lock: WeightsLock = field(default_factory=WeightsLock, repr=False)
    version: int = 0  # the training step whose update these weights include (0: initial)

    @property
    def image_pad_id(self) -> int:
        cfg: Any = self.model.config
        return int(cfg.image_token_id)

    @property
    def banned_ids(self) -> list[int]:
        """Never sampled: a generated image/video pad would break the next forward's image
        placement. The engine and the learner both drop them from the distribution."""
        cfg: Any = self.model.config
        return [int(cfg.image_token_id), int(cfg.video_token_id)]

    @property
    def merge_size(self) -> int:
        return int(self.processor.image_processor.merge_size)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on CUDA; a no-op elsewhere."""
        if self.device.type == "cuda" and self.dtype == torch.bfloat16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """auto: bf16 on GPU, fp32 on CPU (docs/api.md model.dtype)."""
    table = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in table:
        raise ValueError(f"dtype must be auto, bfloat16 or float32, got {dtype!r}")
    return table[dtype]


def load_policy(
    path: str,
    dtype: str = "auto",
    device: str | None = None,
    gradient_checkpointing: bool = False,
) -> Policy:
    """Load model, processor and tokenizer from a local directory (local_files_only)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    compute = resolve_dtype(dtype, dev)
    params = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    model: Any = AutoModelForImageTextToText.from_pretrained(
        path, dtype=params, local_files_only=True, attn_implementation="sdpa"
    )
    model.to(dev)
    if dev.type == "cuda":
        # Same math, faster on GPU: varlen flash attention and a matmul patch embedding for the
        # vision tower (speedups/fast_paths.py; the bench measures each).
        apply_fast_paths(model)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False  # the learner never uses a KV cache; generate() asks for one
    # The text model reads its own config's: left on, a learner forward without checkpointing
    # built a DynamicCache whose per-layer update made torch.compile recompile each layer.
    model.config.get_text_config().use_cache = False
    model.eval()
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    return Policy(model, processor, processor.tokenizer, dev, compute)
