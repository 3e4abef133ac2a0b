"""Real model shapes with random weights, and synthetic multi-turn samples in the real layout.

No weights are downloaded: the models are built from the public config values of Qwen2.5-VL-3B,
Qwen2.5-VL-7B and Qwen3-VL-4B. A sample has per turn 20 prompt tokens, <|vision_start|>,
t*h*w/4 image pads, <|vision_end|> and 100 generated tokens (loss mask 1): 8 turns at 1280x720
give 10,544 tokens and 15 turns at 1920x1080 give 42,195, the issue's baseline lengths for
Qwen2.5-VL.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForImageTextToText

from bench.flops import Shape, vision_attention_flops
from kubecua_trainer.model import Policy
from kubecua_trainer.tokens import Sample

# The real Qwen special-token ids (vocab 151936).
TOKEN_IDS = {"image_token_id": 151655, "video_token_id": 151656,
             "vision_start_token_id": 151652, "vision_end_token_id": 151653}  # fmt: skip

CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl_3b": {
        "model_type": "qwen2_5_vl",
        "tie_word_embeddings": True,
        "text_config": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                        "num_attention_heads": 16, "num_key_value_heads": 2,
                        "vocab_size": 151936, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                            "mrope_section": [16, 24, 24]}},
        "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                          "num_heads": 16, "out_hidden_size": 2048, "patch_size": 14,
                          "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
    },
    "qwen2_5_vl_7b": {
        "model_type": "qwen2_5_vl",
        "tie_word_embeddings": False,
        "text_config": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                        "num_attention_heads": 28, "num_key_value_heads": 4,
                        "vocab_size": 152064, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                            "mrope_section": [16, 24, 24]}},
        "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                          "num_heads": 16, "out_hidden_size": 3584, "patch_size": 14,
                          "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
    },
    "qwen3_vl_4b": {
        "model_type": "qwen3_vl",
        "tie_word_embeddings": True,
        "text_config": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                        "vocab_size": 151936, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 5e6,
                                            "mrope_section": [24, 20, 20],
                                            "mrope_interleaved": True}},
        "vision_config": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096,
                          "num_heads": 16, "out_hidden_size": 2560, "patch_size": 16,
                          "num_position_embeddings": 2304, "hidden_act": "gelu_pytorch_tanh",
                          "deepstack_visual_indexes": [5, 11, 17]},
    },
    # CPU smoke only: the Qwen2.5-VL architecture at toy width (the real vocabulary and token ids).
    "tiny_qwen2_5_vl": {
        "model_type": "qwen2_5_vl",
        "tie_word_embeddings": True,
        "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2,
                        "vocab_size": 151936, "tie_word_embeddings": True,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                            "mrope_section": [4, 2, 2]}},
        "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64,
                          "num_heads": 2, "out_hidden_size": 64, "patch_size": 14,
                          "window_size": 56, "fullatt_block_indexes": [1]},
    },
}  # fmt: skip

PROMPT_TOKENS, GENERATED_TOKENS = 20, 100


def build_model(name: str, device: str) -> Any:
    """A randomly initialised model of the named shape (SDPA attention, no KV cache): bf16 on
    CUDA, fp32 on the CPU (whose bf16 matmuls are too slow even for the toy smoke run)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    spec = dict(CONFIGS[name])
    model_type = spec.pop("model_type")
    config = AutoConfig.for_model(model_type, **spec, **TOKEN_IDS)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(
            config, dtype=dtype, attn_implementation="sdpa"
        )
    model.config.use_cache = False
    return model


def bench_policy(model: Any) -> Policy:
    """A Policy around a bare model (the learner needs no tokenizer; merge size 2 as in Qwen)."""
    param = next(model.parameters())
    processor = SimpleNamespace(image_processor=SimpleNamespace(merge_size=2))
    return Policy(model, processor, None, param.device, param.dtype)


def image_grid(width: int, height: int, patch: int) -> tuple[int, int, int]:
    """(t, h, w) patches of a screenshot after the processor's resize to multiples of 2*patch.

    Example: 1280x720 with patch 14 -> 728x1288 px -> (1, 52, 92): 52*92/4 = 1,196 image tokens.
    """
    f = 2 * patch
    return 1, max(1, round(height / f)) * 2, max(1, round(width / f)) * 2


def synthetic_sample(
    model: Any, images: int, width: int, height: int, seed: int = 0, length: int | None = None
) -> Sample:
    """A multi-turn sample (random pixels, random text ids) with the real token layout. With
    `length`, earlier turns' text (prompt tokens, no loss) opens it up to that many tokens: the
    shape of a loop's samples, which keep one screenshot of many turns (bench/loop_bench.py)."""
    vcfg = model.config.vision_config
    grid = image_grid(width, height, vcfg.patch_size)
    pads = grid[0] * grid[1] * grid[2] // 4
    gen = torch.Generator().manual_seed(seed)
    ids: list[torch.Tensor] = []
    mask: list[torch.Tensor] = []
    history = (length or 0) - images * (PROMPT_TOKENS + pads + 2 + GENERATED_TOKENS)
    if history > 0:
        ids.append(torch.randint(0, 151000, (history,), generator=gen))
        mask.append(torch.zeros(history, dtype=torch.bool))
    for _ in range(images):
        turn = [torch.randint(0, 151000, (PROMPT_TOKENS,), generator=gen),
                torch.tensor([TOKEN_IDS["vision_start_token_id"]]),
                torch.full((pads,), TOKEN_IDS["image_token_id"]),
                torch.tensor([TOKEN_IDS["vision_end_token_id"]]),
                torch.randint(0, 151000, (GENERATED_TOKENS,), generator=gen)]  # fmt: skip
        ids += turn
        mask += [torch.zeros(len(t), dtype=torch.bool) for t in turn[:-1]]
        mask.append(torch.ones(GENERATED_TOKENS, dtype=torch.bool))
    input_ids, loss_mask = torch.cat(ids), torch.cat(mask)
    patch_dim = 3 * vcfg.temporal_patch_size * vcfg.patch_size**2
    n_patches = images * grid[0] * grid[1] * grid[2]
    return Sample(
        input_ids=input_ids,
        loss_mask=loss_mask,
        behaviour_logprobs=torch.where(loss_mask, -12.0, 0.0),  # ~log(1/151936): TIS weight ~1
        pixel_values=torch.randn(n_patches, patch_dim, generator=gen),
        image_grid_thw=torch.tensor([grid] * images),
        advantage=1.0,
    )


def _unique_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


def _vision_pieces(model: Any, grid: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """(windowed-layer pieces, full-layer pieces) of one image, in patches."""
    vcfg = model.config.vision_config
    whole = [grid[0] * grid[1] * grid[2]]
    window = getattr(vcfg, "window_size", 0)
    if not window:
        return whole, whole
    side = window // vcfg.patch_size // 2  # merged units per window side (112 px -> 4)
    h, w = grid[1] // 2, grid[2] // 2
    rows = [min(side, h - i) for i in range(0, h, side)]
    cols = [min(side, w - j) for j in range(0, w, side)]
    return [4 * r * c for r in rows for c in cols], whole


def flop_shape(model: Any, sample: Sample) -> Shape:
    """The FLOP-count shape of this model on this sample."""
    inner = model.model
    tcfg, vcfg = model.config.text_config, model.config.vision_config
    head_dim = getattr(tcfg, "head_dim", None) or tcfg.hidden_size // tcfg.num_attention_heads
    grids = [tuple(int(x) for x in g) for g in sample.image_grid_thw.tolist()]  # type: ignore[union-attr]
    full_layers = len(getattr(vcfg, "fullatt_block_indexes", []) or []) or vcfg.depth
    attn = 0.0
    for g in grids:
        windows, whole = _vision_pieces(model, g)  # type: ignore[arg-type]
        attn += vision_attention_flops(whole, vcfg.hidden_size, full_layers)
        if full_layers < vcfg.depth:
            attn += vision_attention_flops(windows, vcfg.hidden_size, vcfg.depth - full_layers)
    text = _unique_params(inner.language_model) + (
        0 if model.config.tie_word_embeddings else model.lm_head.weight.numel()
    )
    return Shape(
        text_params=text,
        text_layers=tcfg.num_hidden_layers,
        attn_width=tcfg.num_attention_heads * head_dim,
        vision_params=_unique_params(inner.visual),
        tokens=len(sample.input_ids),
        patches=sum(g[0] * g[1] * g[2] for g in grids),
        vision_attn=attn,
    )
