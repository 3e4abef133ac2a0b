"""Variable-length flash attention for the vision towers (CUDA), through torch's varlen_attn.

Why: with attn_implementation "sdpa", the Qwen2.5-VL / Qwen3-VL vision attention splits the packed
patches at every window or image boundary and calls SDPA once per piece: a 1280x720 screenshot has
~75 windows, so 8 screenshots make ~600 tiny kernel launches per windowed layer, forward, backward
and recompute. transformers takes its cu_seqlens path (one kernel per layer) only when the
implementation's name contains "flash"; the flash-attn package is not installed, so we register
torch.nn.attention.varlen.varlen_attn (the same FlashAttention-2 kernels, shipped inside torch)
under such a name and give it to the vision sub-config only. The text model stays on SDPA, whose
causal single-sequence path already uses the flash kernel.
What it leaves out: packing several trajectories in one text row (each sample is its own
batch-of-one forward, so there is no padding to remove).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from transformers import AttentionInterface

VARLEN = "kubecua_flash_varlen"  # must contain "flash" (transformers' is_flash_attention_requested)


def varlen_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    is_causal: bool | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """(1, heads, T, dim) packed q/k/v -> (1, T, heads, dim): attention within each piece.

    Example: cu_seq_lens_q [0, 64, 128] attends patches 0-63 among themselves and 64-127 among
    themselves, the same as two SDPA calls of 64 patches each.
    """
    if attention_mask is not None or query.shape[0] != 1:
        raise ValueError("varlen attention takes one packed row and no attention mask")
    total = query.shape[2]
    cu = cu_seq_lens_q if cu_seq_lens_q is not None else torch.tensor([0, total])
    cu = cu.to(device=query.device, dtype=torch.int32)
    if query.device.type != "cuda" or query.dtype not in (torch.bfloat16, torch.float16):
        return _sdpa_pieces(query, key, value, cu, scaling, bool(is_causal)), None
    from torch.nn.attention.varlen import varlen_attn

    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, heads, dim)
    max_len = int(max_length_q) if max_length_q is not None else int((cu[1:] - cu[:-1]).max())
    window = (-1, 0) if is_causal else (-1, -1)
    out: Any = varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scaling, window_size=window)
    return out[None], None


def _sdpa_pieces(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu: torch.Tensor,
    scaling: float | None, causal: bool,
) -> torch.Tensor:  # fmt: skip
    """The fallback (CPU, fp32: no flash kernel): one SDPA call per piece, as transformers does."""
    lengths = (cu[1:] - cu[:-1]).tolist()
    outs = [
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, scale=scaling, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
        )
        for q, k, v in zip(*(t.split(lengths, dim=2) for t in (query, key, value)), strict=True)
    ]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()


def register() -> None:
    AttentionInterface.register(VARLEN, varlen_attention_forward)


def use_varlen_vision_attention(model: torch.nn.Module) -> bool:
    """Route the vision tower's attention through varlen_attention_forward; returns whether the
    model has a vision tower. Calls that reach it on CPU or in fp32 (no flash kernel there) fall
    back to per-piece SDPA, so the switch is safe everywhere and only pays on CUDA in bf16.
    """
    visual: Any = getattr(getattr(model, "model", model), "visual", None)
    if visual is None:
        return False
    register()
    visual.config._attn_implementation = VARLEN
    return True


TEXT_ATTENTION = ("flash", "cudnn")


def text_attention(backend: str) -> contextlib.AbstractContextManager[Any]:
    """SDPA's backend order for the learner's text attention: "flash" leaves torch's own order
    (FlashAttention-2 first for the causal bf16 sequence); "cudnn" puts cuDNN's fused attention
    first, flash after it where cuDNN refuses the inputs.

    Under torch.compile the backend is fixed when a layer is traced, so the order must be in force
    at the learner's first forward and around its backward (the checkpointed layers' recompute).
    Not wired into the learner yet: bench/learner_profile.py's cudnn stage holds it around the
    learner's calls to measure it first (issue 46; no GPU figure yet, docs/benchmarks.md).
    """
    if backend not in TEXT_ATTENTION:
        raise ValueError(f"text attention backend {backend!r}: one of {TEXT_ATTENTION}")
    if backend == "flash":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
             SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]  # fmt: skip
    return sdpa_kernel(order, set_priority=True)
