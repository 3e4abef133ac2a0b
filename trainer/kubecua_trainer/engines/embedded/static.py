"""The static reference engine: transformers generate() on one batch of requests with the same
SamplingParams, each prompt recomputed in full; a new request waits until the batch has finished.
Kept as the reference the continuous engine is compared with
(trainer/tests/test_engine_continuous.py, bench/generation_bench.py). On an H100, batch 8 gave
~7x the tokens/s of batch 1 (95 against 13 tok/s, 3B shape, one 720p image, 2026-11-21).
Behaviour log-probs are recorded inside generate() by a logits processor that keeps only the
current step's (batch, vocab) log-probs, never all steps' logits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from PIL import Image
from transformers import LogitsProcessor, LogitsProcessorList

from kubecua_trainer.engines.base import EngineError, Generation, cut_at_stop
from kubecua_trainer.engines.embedded.sequence import Request
from kubecua_trainer.model import Policy


class RecordLogprobs(LogitsProcessor):
    """Applies temperature and top-p itself and records log softmax(logits / T) of sampled ids.

    generate() calls it once per new token; the id sampled at step k is the last column of
    input_ids at step k+1, so the log-prob of step k is gathered then (the final one in finish()).
    """

    def __init__(self, temperature: float, top_p: float, banned: list[int]):
        self.banned = banned
        self.temperature = temperature
        self.top_p = top_p
        self.prev: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._gather(input_ids[:, -1])
        greedy = self.temperature <= 0
        scaled = scores.float() / (1.0 if greedy else self.temperature)
        scaled[:, self.banned] = float("-inf")
        self.prev = torch.log_softmax(scaled, dim=-1)
        if greedy:
            keep = scaled == scaled.max(dim=-1, keepdim=True).values
            return scaled.masked_fill(~keep, float("-inf"))  # type: ignore[return-value]
        if self.top_p < 1.0:
            sorted_lp, order = self.prev.sort(dim=-1, descending=True)
            drop = sorted_lp.exp().cumsum(-1) - sorted_lp.exp() >= self.top_p
            mask = torch.zeros_like(drop).scatter(-1, order, drop)
            return scaled.masked_fill(mask, float("-inf"))  # type: ignore[return-value]
        return scaled  # type: ignore[return-value]

    def _gather(self, last_ids: torch.Tensor) -> None:
        if self.prev is not None:
            self.logprobs.append(self.prev.gather(-1, last_ids[:, None])[:, 0])
            self.prev = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """(batch, new_tokens) log-probs of the sampled ids."""
        self._gather(sequences[:, -1])
        return torch.stack(self.logprobs, dim=1).cpu()


def batch_inputs(policy: Policy, batch: list[Request]) -> dict[str, Any]:
    """Left-pad the prompts and process the images, checking pads against the grids."""
    pad_id = policy.tokenizer.pad_token_id
    width = max(len(r.prompt_ids) for r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    images: list[Image.Image] = []
    for i, r in enumerate(batch):
        ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
        attn[i, width - len(r.prompt_ids) :] = 1
        images += r.images
    out: dict[str, Any] = {"input_ids": ids, "attention_mask": attn}
    out["mm_token_type_ids"] = (ids == policy.image_pad_id).long()  # 1 = image token
    if images:
        proc = policy.processor.image_processor(images=images, return_tensors="pt")
        out["pixel_values"], out["image_grid_thw"] = proc["pixel_values"], proc["image_grid_thw"]
    pads = int((ids == policy.image_pad_id).sum())
    grid = out.get("image_grid_thw")
    expected = 0 if grid is None else int(grid.prod(-1).sum()) // policy.merge_size**2
    if pads != expected:
        raise EngineError(f"prompts hold {pads} image pads but the images need {expected}")
    return {k: v.to(policy.device) for k, v in out.items()}


def generate_batch(policy: Policy, batch: list[Request]) -> list[Generation]:
    """Sample one batch (same SamplingParams) with the policy's module."""
    s = batch[0].sampling
    inputs = batch_inputs(policy, batch)
    recorder = RecordLogprobs(s.temperature, s.top_p, policy.banned_ids)
    stop = list(s.stop_token_ids) or None
    with policy.lock, torch.no_grad(), policy.autocast():
        version = policy.version
        policy.model.eval()
        seqs = policy.model.generate(  # type: ignore[operator]
            **inputs,
            do_sample=True,
            temperature=1.0,  # the recorder applies temperature and top-p itself
            top_p=1.0,
            top_k=0,
            repetition_penalty=1.0,
            max_new_tokens=s.max_new_tokens,
            eos_token_id=stop,
            pad_token_id=policy.tokenizer.pad_token_id,
            logits_processor=LogitsProcessorList([recorder]),
            use_cache=True,
        )
    new = seqs[:, inputs["input_ids"].shape[1] :].cpu()
    logprobs = recorder.finish(seqs)
    cut = [
        cut_at_stop(new[i].tolist(), logprobs[i].tolist(), s.stop_token_ids, s.max_new_tokens)
        for i in range(len(batch))
    ]
    return [replace(g, policy_version=version) for g in cut]
