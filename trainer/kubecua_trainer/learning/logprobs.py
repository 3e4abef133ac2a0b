"""Per-token log-probs of the trained tokens, in chunks, from the model's last hidden states.

Only the hidden states that predict a generated token (loss mask 1) go through the LM head, a chunk
at a time, and each chunk runs under activation checkpointing: the (chunk, vocab) fp32 logits exist
for one chunk at a time in forward and are recomputed in backward. For Qwen2.5-VL (152k vocab) a
whole 10k-token sequence would otherwise hold ~6 GB of fp32 logits plus their softmax.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from kubecua_trainer.model import Policy
from kubecua_trainer.tokens import Sample


def model_inputs(policy: Policy, sample: Sample) -> dict[str, Any]:
    """Batch-of-one forward inputs, with the image-token types the mRoPE index needs."""
    ids = sample.input_ids[None].to(policy.device)
    inputs: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == policy.image_pad_id).long(),  # 1 = image token
    }
    if sample.pixel_values is not None:
        inputs["pixel_values"] = sample.pixel_values.to(policy.device)
        inputs["image_grid_thw"] = sample.image_grid_thw.to(policy.device)  # type: ignore[union-attr]
    return inputs


def hidden_states(policy: Policy, sample: Sample) -> torch.Tensor:
    """(T, hidden) last hidden states of the decoder; the LM head is not applied."""
    out = policy.model.model(**model_inputs(policy, sample))  # type: ignore[operator]
    return out.last_hidden_state[0]


def _chunk_logprobs(
    hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, temperature: float,
    banned: list[int],
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    logits = (hidden @ weight.T).float() / temperature
    logits[:, banned] = float("-inf")
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets[:, None])[:, 0]
    p = logp_all.exp()
    entropy = -(p * torch.where(p > 0, logp_all, torch.zeros_like(logp_all))).sum(-1)
    return logp, entropy  # with grad: algorithm.entropyCoef's bonus trains through it


def token_logprobs(
    policy: Policy, sample: Sample, temperature: float = 1.0, chunk_size: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob and entropy of each masked (generated) token, in sequence order, both with grad.

    Uses log softmax(logits / temperature) over the vocabulary minus policy.banned_ids, the same
    distribution the hf engine samples from. Example: a 3-token vocabulary with logits [2, 0, 0] at
    T=1 gives the token 0 log-prob 2 - log(e^2 + 2) = -0.2395.
    """
    positions = sample.loss_mask.nonzero()[:, 0].to(policy.device)
    if len(positions) and int(positions[0]) == 0:
        raise ValueError("the first token cannot be a generated token (nothing predicts it)")
    hidden = hidden_states(policy, sample)[positions - 1]
    targets = sample.input_ids.to(policy.device)[positions]
    model: Any = policy.model
    weight: torch.Tensor = model.lm_head.weight
    logps, ents = [], []
    for start in range(0, len(positions), chunk_size):
        h, y = hidden[start : start + chunk_size], targets[start : start + chunk_size]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(
                _chunk_logprobs, h, y, weight, temperature, policy.banned_ids, use_reentrant=False
            )
        else:
            lp, ent = _chunk_logprobs(h, y, weight, temperature, policy.banned_ids)
        logps.append(lp)
        ents.append(ent)
    if not logps:
        empty = torch.zeros(0, device=policy.device)
        return empty, empty
    return torch.cat(logps), torch.cat(ents)
