"""Token exactness of the Conversation builder: same ids as the chat template, exact masks, the
image-pad check, and per-turn prompts with a sliding window of screenshots."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import Generation
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tokens import Conversation, build_turn_prompt, check_image_pads, fit_image

MAX_PIXELS = 56 * 56 * 4
ACTION = "```python\npyautogui.click(100, 200)\n```"


def _gen(policy: Policy, text: str, close: bool) -> Generation:
    ids = policy.tokenizer(text, add_special_tokens=False)["input_ids"]
    if close:
        ids = [*ids, policy.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    return Generation(ids, [-0.5 - i / 100 for i in range(len(ids))], "stop" if close else "length")


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_conversation_ids_equal_chat_template_ids(
    family: str, tiny_model_dir: Path, tiny_qwen3_dir: Path
) -> None:
    policy = load_policy(str(tiny_model_dir if family == "qwen2_5_vl" else tiny_qwen3_dir))
    conv = Conversation(policy, "You are an agent.", MAX_PIXELS)
    conv.add_user("Open the file.", screenshot(1, (300, 170)))
    conv.add_generation(_gen(policy, ACTION, close=True))
    conv.add_user("Now save it.", screenshot(2, (90, 200)))
    ids, images = conv.prompt()

    messages = [
        {"role": "system", "content": "You are an agent."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Open the file."}, {"type": "image"}],
        },
        {"role": "assistant", "content": ACTION},
        {"role": "user", "content": [{"type": "text", "text": "Now save it."}, {"type": "image"}]},
    ]
    text = policy.processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    ref = policy.processor(text=[text], images=images, return_tensors="pt")
    assert ids == ref["input_ids"][0].tolist()
    sample = conv.to_sample()
    assert torch.equal(sample.pixel_values, ref["pixel_values"])
    assert torch.equal(sample.image_grid_thw, ref["image_grid_thw"])


def test_masks_mark_exactly_the_generated_ids(policy: Policy) -> None:
    conv = Conversation(policy, "sys", MAX_PIXELS)
    conv.add_user("first", screenshot(3))
    first = _gen(policy, "pyautogui.press('enter')", close=True)
    conv.add_generation(first)
    conv.add_user("second", None)
    second = _gen(policy, "DONE", close=False)  # hit max_new_tokens: the closer is observation
    conv.add_generation(second)
    s = conv.to_sample()

    assert s.input_ids[s.loss_mask].tolist() == first.token_ids + second.token_ids
    assert s.behaviour_logprobs[s.loss_mask].tolist() == pytest.approx(
        first.logprobs + second.logprobs
    )
    assert float(s.behaviour_logprobs[~s.loss_mask].abs().sum()) == 0.0
    tail = policy.tokenizer.decode(s.input_ids[-2:].tolist())
    assert tail == "<|im_end|>\n"
    assert not s.loss_mask[-2:].any()


def test_image_pad_check_rejects_a_corrupted_sample(policy: Policy) -> None:
    conv = Conversation(policy, "sys", MAX_PIXELS)
    conv.add_user("look", screenshot(4, (200, 120)))
    conv.add_generation(_gen(policy, "WAIT", close=True))
    sample = conv.to_sample()
    check_image_pads(sample, policy.merge_size, policy.image_pad_id)  # intact: no error

    pad = policy.image_pad_id
    first_pad = int((sample.input_ids == pad).nonzero()[0, 0])
    dropped = torch.cat([sample.input_ids[:first_pad], sample.input_ids[first_pad + 1 :]])
    sample.input_ids = dropped
    with pytest.raises(ValueError, match="image-pad tokens"):
        check_image_pads(sample, policy.merge_size, pad)


def test_fit_image_caps_pixels_on_patch_multiples(policy: Policy) -> None:
    img = fit_image(screenshot(5, (1920, 1080)), policy, MAX_PIXELS)
    assert img.width * img.height <= MAX_PIXELS
    assert img.width % 28 == 0
    assert img.height % 28 == 0
    assert abs(img.width / img.height - 1920 / 1080) < 0.3


def test_turn_prompt_keeps_only_last_k_screenshots(policy: Policy) -> None:
    history = [(f"step {i}", screenshot(i), f"pyautogui.click({i}, {i})") for i in range(4)]
    history.append(("step 4", screenshot(4), None))
    conv = build_turn_prompt(policy, "sys", history, keep_images=2, max_pixels=MAX_PIXELS)
    ids, images = conv.prompt()
    assert len(images) == 2
    text = policy.tokenizer.decode(ids)
    assert text.count("<|vision_start|>") == 2
    assert all(f"step {i}" in text for i in range(5))
    assert text.endswith("<|im_start|>assistant\n")
    assert text.index("pyautogui.click(3, 3)") < text.rindex("<|vision_start|>")
    assert not conv.to_sample().loss_mask.any()  # history replies are context, never trained
