"""Token-exact multi-turn context: what the engine saw is what the learner trains on.

A Conversation appends token ids as the episode goes; it never re-tokenises finished text (the known
cause of silent train/inference divergence). Observation tokens (system, user text, the
processor-expanded image pads, the assistant header, the turn closer) get loss mask 0; generated ids
are appended as sampled, with mask 1 and their behaviour log-probs. Images are resized once, here,
to multiples of patch*merge within max_pixels, so the engine and the learner see the same pixels.
Layout, token for token, follows the Qwen-VL chat template:
    <|im_start|>system\\n{system}<|im_end|>\\n
    <|im_start|>user\\n{text}<|vision_start|><|image_pad|>*n<|vision_end|><|im_end|>\\n
    <|im_start|>assistant\\n{generated ids}<|im_end|>\\n ...
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from PIL import Image

from kubecua_trainer.engines.base import Generation
from kubecua_trainer.model import Policy


@dataclass
class Sample:
    """One training sequence; tensors on the CPU."""

    input_ids: torch.Tensor  # (T,) long
    loss_mask: torch.Tensor  # (T,) bool, True on generated tokens
    behaviour_logprobs: torch.Tensor  # (T,) float, 0 where mask is False
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None  # (n_images, 3)
    reward: float = 0.0
    advantage: float = 0.0
    group_id: str = ""
    task_id: str = ""
    policy_version: int = 0  # the oldest weights (training step) any of its tokens came from
    pixels_key: str = ""  # distributed: pixel_values left on this rank (exchange.py)
    # The sampling temperature of its tokens: the learner recomputes log-probs at it, so they are
    # the behaviour log-probs' own distribution also when the temperature follows a schedule.
    temperature: float = 1.0


def check_image_pads(sample: Sample, merge_size: int, image_pad_id: int) -> None:
    """Raise ValueError unless #image-pad tokens == sum(t*h*w) / merge_size**2.

    Example: grids [[1, 6, 8], [1, 4, 4]] with merge 2 need (48 + 16) / 4 = 16 pads.
    """
    pads = int((sample.input_ids == image_pad_id).sum())
    grid = sample.image_grid_thw
    expected = 0 if grid is None else int(grid.prod(dim=-1).sum()) // merge_size**2
    if pads != expected:
        shown = None if grid is None else grid.tolist()
        raise ValueError(
            f"corrupted sample: {pads} image-pad tokens but image_grid_thw {shown}"
            f" needs {expected} (merge size {merge_size})"
        )
    patches = None if sample.pixel_values is None else sample.pixel_values.shape[0]
    if grid is not None and patches is not None and int(grid.prod(dim=-1).sum()) != patches:
        raise ValueError(
            f"corrupted sample: pixel_values has {patches} patches, "
            f"image_grid_thw needs {int(grid.prod(dim=-1).sum())}"
        )


def fit_image(image: Image.Image, policy: Policy, max_pixels: int) -> Image.Image:
    """Resize to multiples of patch*merge with at most max_pixels (aspect ratio kept).

    Example: Qwen2.5-VL (factor 28), 1920x1080 with max_pixels 1003520 -> 1316x728 (958,048 px).
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    ip = policy.processor.image_processor
    factor = int(ip.patch_size) * int(ip.merge_size)
    cap = min(max_pixels, int(ip.size["longest_edge"]))
    floor = min(int(ip.size["shortest_edge"]), cap)
    h, w = smart_resize(image.height, image.width, factor, floor, cap)
    image = image.convert("RGB")
    return image if (w, h) == image.size else image.resize((w, h), Image.Resampling.BICUBIC)


class Conversation:
    """Token-exact multi-turn context. Observation tokens (system, user text, processor-expanded
    image pads, the assistant header) get loss mask 0; generated tokens get mask 1 with their
    behaviour logprobs."""

    def __init__(self, policy: Policy, system_prompt: str, max_pixels: int):
        self._policy = policy
        self._max_pixels = max_pixels
        self._ids: list[int] = []
        self._mask: list[bool] = []
        self._logprobs: list[float] = []
        self._images: list[Image.Image] = []
        self._pixels: list[torch.Tensor] = []
        self._grids: list[torch.Tensor] = []
        self._versions: list[int] = []
        self._awaiting_generation = False
        self._observe(f"<|im_start|>system\n{system_prompt}<|im_end|>\n")

    def _encode(self, text: str) -> list[int]:
        return list(self._policy.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _observe(self, text: str) -> None:
        self._observe_ids(self._encode(text))

    def _observe_ids(self, ids: list[int]) -> None:
        self._ids += ids
        self._mask += [False] * len(ids)
        self._logprobs += [0.0] * len(ids)

    def _image_pads(self, image: Image.Image) -> list[int]:
        """Fit the image, run the image processor once, return its expanded pad ids."""
        image = fit_image(image, self._policy, self._max_pixels)
        out = self._policy.processor.image_processor(images=[image], return_tensors="pt")
        grid = out["image_grid_thw"]
        self._images.append(image)
        self._pixels.append(out["pixel_values"])
        self._grids.append(grid)
        n = int(grid.prod()) // self._policy.merge_size**2
        return [self._policy.image_pad_id] * n

    def add_user(self, text: str, image: Image.Image | None) -> None:
        """Append a user turn (text, then the screenshot) and the assistant header."""
        if self._awaiting_generation:
            raise ValueError("add_generation() must follow add_user() before the next user turn")
        if image is None:
            self._observe(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")
        else:
            self._observe(f"<|im_start|>user\n{text}<|vision_start|>")
            self._observe_ids(self._image_pads(image))
            self._observe("<|vision_end|><|im_end|>\n<|im_start|>assistant\n")
        self._awaiting_generation = True

    def prompt(self) -> tuple[list[int], list[Image.Image]]:
        """Ids so far and the fitted images in order, to hand to Engine.generate."""
        return list(self._ids), list(self._images)

    def add_generation(self, gen: Generation) -> None:
        """Append the sampled ids (mask 1) and close the turn with mask-0 tokens."""
        if len(gen.token_ids) != len(gen.logprobs):
            raise ValueError(f"{len(gen.token_ids)} ids but {len(gen.logprobs)} logprobs")
        self._append_assistant(list(gen.token_ids), list(gen.logprobs), trained=True)
        self._versions.append(gen.policy_version)

    def add_assistant_text(self, text: str) -> None:
        """Append an earlier assistant reply as context (mask 0), for per-turn prompts."""
        self._append_assistant(self._encode(text), [], trained=False)

    def _append_assistant(self, ids: list[int], logprobs: list[float], trained: bool) -> None:
        if not self._awaiting_generation:
            raise ValueError("an assistant turn must follow add_user()")
        self._ids += ids
        self._mask += [trained] * len(ids)
        self._logprobs += logprobs if trained else [0.0] * len(ids)
        im_end = self._policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._observe("\n" if ids and ids[-1] == im_end else "<|im_end|>\n")
        self._awaiting_generation = False

    def to_sample(self) -> Sample:
        sample = Sample(
            input_ids=torch.tensor(self._ids, dtype=torch.long),
            loss_mask=torch.tensor(self._mask, dtype=torch.bool),
            behaviour_logprobs=torch.tensor(self._logprobs, dtype=torch.float32),
            pixel_values=torch.cat(self._pixels) if self._pixels else None,
            image_grid_thw=torch.cat(self._grids) if self._grids else None,
            policy_version=min(self._versions, default=0),
        )
        check_image_pads(sample, self._policy.merge_size, self._policy.image_pad_id)
        return sample


def build_turn_prompt(
    policy: Policy,
    system_prompt: str,
    history: list[tuple[str, Image.Image | None, str | None]],
    keep_images: int,
    max_pixels: int,
) -> Conversation:
    """perTurn mode: a fresh exact prompt that keeps only the last `keep_images` screenshots.

    history is [(user text, screenshot or None, assistant reply or None)], oldest first; replies
    are context (mask 0). Example: 5 turns with screenshots and keep_images=2 -> only the
    screenshots of turns 4 and 5 are in the prompt; every turn's text stays.
    """
    if keep_images < 0:
        raise ValueError(f"keep_images must be >= 0, got {keep_images}")
    with_image = [i for i, (_, img, _) in enumerate(history) if img is not None]
    kept = set(with_image[len(with_image) - keep_images :]) if keep_images else set()
    conv = Conversation(policy, system_prompt, max_pixels)
    for i, (text, image, reply) in enumerate(history):
        conv.add_user(text, image if i in kept else None)
        if reply is not None:
            conv.add_assistant_text(reply)
    return conv
