"""Learner step benchmark at a real model shape (random weights): seconds and peak GPU memory.

What it does: builds a Qwen2.5-VL-3B-shaped model with random weights from a config (no download;
tokenizer from tiny_models), makes one multi-turn sample of N screenshots at WxH with G generated
tokens per turn, and times Learner.step (bf16 autocast, gradient checkpointing, chunked log-probs).
Comparable to the naive transformers baseline measured on one H100 on 2026-11-21 (8 x 1280x720,
checkpointing: 8.57 s/step, 39.2 GiB peak).
What it leaves out: generation, and any multi-GPU sharding.
How to run (GPU): `python -m bench.step_bench --images 8 --size 1280x720`
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch
from transformers import AutoConfig, AutoModelForImageTextToText

from bench.testing.images import screenshot
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import Generation
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.model import load_policy
from kubecua_trainer.tiny_models import build_processor, train_tokenizer
from kubecua_trainer.tokens import Conversation

QWEN25_VL_3B = {
    "text_config": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                    "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                        "mrope_section": [16, 24, 24]}},
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "out_hidden_size": 2048,
                      "fullatt_block_indexes": [7, 15, 23, 31]},
}  # fmt: skip


def build_3b(out: str) -> None:
    tok = train_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>")}
    ids |= {t: tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>")}
    config = AutoConfig.for_model(
        "qwen2_5_vl", **QWEN25_VL_3B, image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )  # fmt: skip
    with torch.device("cuda"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    processor = build_processor("qwen2_5_vl", tok)
    processor.image_processor.size = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 16384}
    processor.save_pretrained(out)
    tok.save_pretrained(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--generated", type=int, default=256, help="generated tokens per turn")
    parser.add_argument("--dtype", choices=("auto", "bfloat16"), default="auto")
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        build_3b(tmp)
        policy = load_policy(tmp, args.dtype, device="cuda", gradient_checkpointing=True)
    conv = Conversation(policy, "You are a computer-use agent.", w * h)
    for i in range(args.images):
        conv.add_user(f"step {i}", screenshot(i, (w, h)))
        gen = [(i * 31 + j * 7) % 400 + 20 for j in range(args.generated)]
        conv.add_generation(Generation(gen, [-1.0] * len(gen), "length"))
    sample = conv.to_sample()
    sample.advantage = 1.0
    learner = Learner(policy, AlgorithmConfig(learning_rate=1e-6))
    learner.step([sample])  # warm-up (allocator, kernels)
    static = torch.cuda.memory_allocated()  # fp32 weights + AdamW moments
    torch.cuda.reset_peak_memory_stats()
    m = learner.step([sample])
    print(json.dumps({
        "dtype": args.dtype, "tokens": len(sample.input_ids),
        "trained_tokens": int(sample.loss_mask.sum()),
        "step_seconds": round(m["seconds"], 2),
        "static_gib": round(static / 2**30, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
        "tokens_per_second": round(len(sample.input_ids) / m["seconds"]),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
