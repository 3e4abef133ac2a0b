"""The tiny Qwen2.5-VL / Qwen3-VL fixtures: real special tokens, real template structure, real
loading path (Auto classes, local directory), and a token-exact sample/score round trip on each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import load_policy
from kubecua_trainer.tiny_models import SPECIAL_TOKENS, main
from kubecua_trainer.tokens import Conversation


@pytest.fixture(params=["qwen2_5_vl", "qwen3_vl"])
def model_dir(request: pytest.FixtureRequest, tiny_model_dir: Path, tiny_qwen3_dir: Path) -> Path:
    return tiny_model_dir if request.param == "qwen2_5_vl" else tiny_qwen3_dir


def test_fixture_loads_with_auto_classes_and_is_tiny(model_dir: Path) -> None:
    policy = load_policy(str(model_dir), device="cpu")
    tok = policy.tokenizer
    for t in SPECIAL_TOKENS:
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1, t
    assert policy.image_pad_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert tok.eos_token == "<|im_end|>"
    assert sum(p.numel() for p in policy.model.parameters()) < 1_000_000
    text = policy.processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_engine_and_learner_agree_on_each_family(model_dir: Path) -> None:
    policy = load_policy(str(model_dir), device="cpu")
    conv = Conversation(policy, "sys", 64 * 64 * 2)
    conv.add_user("click", screenshot(7, (180, 110)))

    async def sample() -> None:
        engine = HFEngine(policy)
        conv.add_generation(await engine.generate(*conv.prompt(), SamplingParams(max_new_tokens=6)))
        await engine.close()

    asyncio.run(sample())
    s = conv.to_sample()
    with torch.no_grad():
        logp, entropy = token_logprobs(policy, s)
    assert torch.allclose(logp, s.behaviour_logprobs[s.loss_mask], atol=1e-4)
    assert bool((entropy > 0).all())


def test_cli_writes_a_loadable_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main([str(tmp_path / "m"), "--family", "qwen3_vl", "--seed", "1"])
    assert "tiny qwen3_vl written" in capsys.readouterr().out
    policy = load_policy(str(tmp_path / "m"), device="cpu")
    assert policy.model.config.model_type == "qwen3_vl"
