"""Speed switches for the learner's model that keep its math: varlen vision attention
(attention.py), the patch embedding as one matmul, and optional torch.compile of the layers.

Why the patch embedding: Qwen-VL embeds patches with a Conv3d whose kernel equals its stride, so it
is a plain (patches x 1176) @ (1176 x hidden) product; cuDNN's 3-D convolution (above all its
backward) is far slower than that matmul on 38k patches.
Why compile: the decoder layers and vision blocks spend much of their time in small elementwise
kernels (fp32 RMSNorm, rotary, SiLU * up, residual adds) that torch.compile fuses.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from kubecua_trainer.speedups.attention import use_varlen_vision_attention
from kubecua_trainer.speedups.checkpointing import layer_stacks


def _linear_patch_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    weight = self.proj.weight
    flat = hidden_states.reshape(-1, weight[0].numel()).to(weight.dtype)
    out = torch.nn.functional.linear(flat, weight.reshape(weight.shape[0], -1))
    return out if self.proj.bias is None else out + self.proj.bias


def linear_patch_embed(model: torch.nn.Module) -> bool:
    """Run the vision patch embedding's Conv3d as the equivalent matmul (same weights)."""
    visual: Any = getattr(getattr(model, "model", model), "visual", None)
    if visual is None:
        return False
    embed = visual.patch_embed
    embed.forward = types.MethodType(_linear_patch_forward, embed)
    return True


def compile_layers(model: torch.nn.Module, backend: str = "inductor") -> int:
    """torch.compile each decoder layer and vision block (shapes dynamic: every sample differs).

    One graph serves all layers of a stack (parameters are graph inputs). Returns how many. The
    embedded engine runs these layers eagerly (engines/embedded/attention.py, engine_mode).
    backend: "eager" traces without generating code (the CPU test of recompilations).
    """
    import torch._dynamo
    import torch._inductor.config

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    # No padding of matmul shapes or strides: a checkpointed block's recomputation (its own graph)
    # padded the vision MLP's 3,420 columns to 3,424 where the first forward had not, and
    # checkpointing refuses recomputed tensors whose shapes differ (seen in the loop on an H200).
    torch._inductor.config.shape_padding = False
    torch._inductor.config.comprehensive_padding = False
    layers = [layer for stack in layer_stacks(model) for layer in stack]
    for layer in layers:
        layer.compile(dynamic=True, backend=backend)
    return len(layers)


def apply_fast_paths(model: torch.nn.Module, compile_model: bool = False) -> dict[str, Any]:
    """All of the above; returns what was applied, for the benchmark's JSON."""
    return {
        "varlen_vision": use_varlen_vision_attention(model),
        "linear_patch_embed": linear_patch_embed(model),
        "compiled_layers": compile_layers(model) if compile_model else 0,
    }
