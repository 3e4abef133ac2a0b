"""Build a tiny Qwen2.5-VL or Qwen3-VL as a local HF directory, for tests and `make demo`.

What it does: trains a byte-level BPE tokenizer locally with `tokenizers` (no hub), adds the real
Qwen special tokens (<|im_start|>, <|im_end|>, <|vision_start|>, <|image_pad|>, ...), writes a chat
template of the real Qwen-VL structure, builds the model from a config with random weights (a few
hundred thousand parameters) and saves model, tokenizer and processor with `save_pretrained`, so
the trainer loads it through the same Auto classes as a real checkpoint.
Sizes (SIZES): "tiny" for the tests and the pipeline checks; "bench" (0.5 million parameters,
width 128, 2 layers, tied embeddings, a tokenizer that also learns the lines of --corpus so each
task word is one token) for the learning benchmark and the demo, where the model has to learn to
copy words from the instruction into its reply (bench/learning/run.py; docs/benchmarks.md).
What it leaves out: videos, tool calls and any pretrained knowledge (the weights are random).
How to run: `python -m kubecua_trainer.tiny_models OUT_DIR --family qwen2_5_vl
[--size bench --corpus FILE]`
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoConfig,
    AutoModelForImageTextToText,
    GenerationConfig,
    PreTrainedTokenizerFast,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

FAMILIES = ("qwen2_5_vl", "qwen3_vl")

# The real Qwen2.5-VL / Qwen3-VL special tokens, in their real order (ids follow the base vocab).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Same structure as the Qwen-VL template: default system turn, image placeholders inside user
# content, <|im_end|>\n after every turn, and `<|im_start|>assistant\n` as the generation prompt.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Text the tokenizer learns merges from: the agent's vocabulary (pyautogui actions, UI words).
_CORPUS = [
    "```python\npyautogui.click(100, 200)\n```",
    "```python\npyautogui.typewrite('hello world')\npyautogui.press('enter')\n```",
    "pyautogui.hotkey('ctrl', 's') pyautogui.moveTo(640, 360) pyautogui.scroll(-3)",
    "DONE FAIL WAIT You are a computer-use agent. Look at the screenshot and act.",
    "Open the file, type the text, save the document and close the window.",
    "The screen shows a terminal, a browser, a text editor and a file manager.",
    "0 1 2 3 4 5 6 7 8 9 10 20 50 100 200 300 400 500 640 720 1080 1280 1920",
]


# Text sizes per preset. "bench": tied input/output embeddings, so a word the model has only read
# (a held-out instance's parameter) already has an output row that a copy circuit can reach.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "tie": False, "vocab": 600},
    "bench": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "tie": True, "vocab": 1500},
}  # fmt: skip


def train_tokenizer(
    vocab_size: int = 600, extra_corpus: list[str] | None = None
) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on a tiny corpus (plus `extra_corpus`, repeated so its words become
    single tokens), with the Qwen special tokens added on top."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4 + (extra_corpus or []) * 8, trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _text_config(family: str, vocab: int, ids: dict[str, Any], size: str) -> dict[str, Any]:
    dims = SIZES[size]
    base: dict[str, Any] = {
        "vocab_size": vocab,
        **{k: dims[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers")},
        **{k: dims[k] for k in ("num_attention_heads", "num_key_value_heads")},
        "max_position_embeddings": 4096,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    # head_dim 16 -> 8 rotary frequencies split over (temporal, height, width); 32 -> 16.
    head_dim = dims["hidden_size"] // dims["num_attention_heads"]
    section = [4, 2, 2] if head_dim == 16 else [8, 4, 4]
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
    if family == "qwen3_vl":
        base["head_dim"] = head_dim
        rope["mrope_interleaved"] = True
    base["rope_parameters"] = rope
    return base


def _vision_config(family: str, out: int) -> dict[str, Any]:
    """The vision tower; `out` is the text model's width (its merger projects to it)."""
    common = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
    if family == "qwen2_5_vl":
        return {**common, "out_hidden_size": out, "patch_size": 14, "window_size": 56,
                "fullatt_block_indexes": [1]}  # fmt: skip
    return {**common, "out_hidden_size": out, "patch_size": 16, "num_position_embeddings": 256,
            "deepstack_visual_indexes": [0]}  # fmt: skip


def build_config(family: str, tokenizer: PreTrainedTokenizerFast, size: str = "tiny") -> Any:
    """The model config: real architecture, tiny sizes, token ids taken from our tokenizer."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    return AutoConfig.for_model(
        family,
        text_config=_text_config(family, len(tokenizer), ids, size),
        vision_config=_vision_config(family, SIZES[size]["hidden_size"]),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=SIZES[size]["tie"],
    )


def build_processor(family: str, tokenizer: PreTrainedTokenizerFast) -> Any:
    """Processor of the family's class with a PIL image processor (torchvision is not needed)."""
    patch = 14 if family == "qwen2_5_vl" else 16
    factor = patch * 2
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=factor * factor,
        max_pixels=factor * factor * 1024,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    video_kwargs = {"patch_size": patch, "merge_size": 2, "temporal_patch_size": 2}
    if family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLProcessor as cls
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import (
            Qwen2VLVideoProcessor as video_cls,
        )
    else:
        from transformers import Qwen3VLProcessor as cls  # type: ignore[assignment]
        from transformers import Qwen3VLVideoProcessor as video_cls  # type: ignore[assignment]
    return cls(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_cls(**video_kwargs),
        chat_template=CHAT_TEMPLATE,
    )


def build_tiny_model(
    out_dir: str | Path,
    family: str = "qwen2_5_vl",
    seed: int = 0,
    size: str = "tiny",
    corpus: list[str] | None = None,
) -> Path:
    """Write a tiny `family` model + tokenizer + processor to out_dir; returns the path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(SIZES[size]["vocab"], corpus)
    config = build_config(family, tokenizer, size)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id,
        pad_token_id=config.text_config.pad_token_id,
        do_sample=True,
        top_k=0,
    )
    model.save_pretrained(out)
    build_processor(family, tokenizer).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory to write the HF model into")
    parser.add_argument("--family", choices=FAMILIES, default="qwen2_5_vl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--corpus", type=Path, help="extra tokenizer text, one line a sample")
    args = parser.parse_args(argv)
    corpus = args.corpus.read_text().splitlines() if args.corpus else None
    path = build_tiny_model(args.out_dir, args.family, args.seed, args.size, corpus)
    print(f"tiny {args.family} written to {path}")


if __name__ == "__main__":
    main()
