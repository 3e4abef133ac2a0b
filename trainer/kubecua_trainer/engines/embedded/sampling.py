"""Sampling one id per row, and the behaviour log-prob the learner recomputes (engines/base.py:
log softmax(logits / T) over the vocabulary minus the banned ids, before top-p)."""

from __future__ import annotations

import torch

from kubecua_trainer.engines.embedded.keyed import gumbel_argmax


def sample_rows(
    logits: torch.Tensor,
    temperatures: list[float],
    top_ps: list[float],
    banned: list[int],
    generator: torch.Generator | None = None,
    keys: list[int | None] | None = None,
) -> tuple[list[int], list[float]]:
    """Sample one id per row; return the ids and log softmax(logits / T) of each (before top-p).

    T <= 0 is greedy (argmax, log-probs at T = 1). Example: logits [[2, 0, 0]] at T = 1 can give
    id 1 with log-prob 0 - log(e^2 + 2) = -2.2395. A row with a key (keyed.key_of: its request's
    SamplingParams.seed and token index) draws from its key alone (keyed.py); the others from
    `generator`, in batch order.
    """
    scores = logits.float()
    temps = torch.tensor([t if t > 0 else 1.0 for t in temperatures], device=scores.device)
    scaled = scores / temps[:, None]
    scaled[:, banned] = float("-inf")
    logp = torch.log_softmax(scaled, dim=-1)
    masked = scaled
    if any(p < 1.0 for p in top_ps):  # rows at 1.0 keep every id (inf: no rounding cut)
        top_p = torch.tensor([p if p < 1.0 else float("inf") for p in top_ps], device=scores.device)
        top_p = top_p[:, None]
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        probs = sorted_lp.exp()
        drop = probs.cumsum(-1) - probs >= top_p
        masked = scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    greedy = [t <= 0 for t in temperatures]
    keyed = [(i, k) for i, k in enumerate(keys or []) if k is not None and not greedy[i]]
    if all(greedy):
        ids = scaled.argmax(dim=-1)
    elif keyed:
        ids = scaled.argmax(dim=-1)
        own = {i for i, _ in keyed}
        free = [i for i, g in enumerate(greedy) if not g and i not in own]
        if free:  # the generator's draws, for these rows only
            rows = torch.tensor(free, device=scores.device)
            probs = torch.softmax(masked[rows], dim=-1)
            ids[rows] = torch.multinomial(probs, 1, generator=generator)[:, 0]
        rows = torch.tensor([i for i, _ in keyed], device=scores.device)
        ids[rows] = gumbel_argmax(masked[rows], [k for _, k in keyed])
    else:
        ids = torch.multinomial(torch.softmax(masked, dim=-1), 1, generator=generator)[:, 0]
        if any(greedy):
            rows = torch.tensor(greedy, device=scores.device)
            ids = torch.where(rows, scaled.argmax(dim=-1), ids)
    lps = logp.gather(-1, ids[:, None])[:, 0]
    return ids.tolist(), lps.tolist()
