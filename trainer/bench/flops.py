"""Model FLOPs of one forward+backward, counted the way the issue's baseline counts them.

6 * N * T for the matrix products (2 forward, 4 backward per parameter and token), with the text
model's N applied per sequence token and the vision tower's N per image patch; plus attention
(causal in the text model, within windows/images in the vision tower); plus one more forward
(2 * N * T and the attention forward again) for each checkpointed layer that backward recomputes.
The LM head is counted over every token, as the baseline computes it, whichever path runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """What the FLOP count needs of a model and a sample."""

    text_params: int  # decoder + embeddings/LM head (tied: counted once)
    text_layers: int
    attn_width: int  # heads * head_dim of the text model
    vision_params: int
    tokens: int  # sequence length T
    patches: int  # vision patches (4 per image token with merge size 2)
    vision_attn: float  # forward FLOPs of all vision attention (see vision_attention_flops)


def vision_attention_flops(pieces: list[int], width: int, layers: int) -> float:
    """Forward FLOPs of full attention within each piece: 4 * n^2 * width per piece and layer.

    Example: two 64-patch windows, width 1280, 28 layers: 2 * 4 * 64^2 * 1280 * 28 = 1.174e9.
    """
    return float(sum(4 * n * n for n in pieces) * width * layers)


def forward_flops(s: Shape) -> tuple[float, float]:
    """(text, vision) forward FLOPs.

    Example: text 1e9 params, 10 layers, width 1024, T = 1000, no images: 2e9 * 1000 = 2e12 for
    the matmuls + causal attention 2 * 1000^2 * 1024 * 10 = 2.048e10 -> text 2.02048e12.
    """
    text = 2.0 * s.text_params * s.tokens + 2.0 * s.tokens**2 * s.attn_width * s.text_layers
    vision = 2.0 * s.vision_params * s.patches + s.vision_attn
    return text, vision


def train_flops(s: Shape, text_ckpt: float = 0.0, vision_ckpt: float = 0.0) -> float:
    """Forward + backward (3x forward) plus the recomputed fraction of each tower's forward.

    Example: the text-only shape above, fully checkpointed: 4 * 2.02048e12 = 8.08192e12.
    """
    text, vision = forward_flops(s)
    return text * (3.0 + text_ckpt) + vision * (3.0 + vision_ckpt)
