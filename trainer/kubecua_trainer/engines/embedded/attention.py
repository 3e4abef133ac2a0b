"""The engine's attention, routed in only while the engine runs the policy (engine_mode, held
under policy.lock, so the learner never sees it); the vision tower keeps its own implementation.

- Decode (one query token): (B, H, 1, D) queries regrouped as (B, H_kv, H / H_kv, D), so one SDPA
  call with the padding mask serves GQA without repeating K and V (transformers' SDPA path repeats
  them whenever a mask is given).
- Packed prefill (a Packing is set): the joining requests' new tokens in one row, each attending
  causally to its own reused prefix and new tokens: variable-length flash attention (torch's
  varlen_attn, as the learner's vision tower uses) on CUDA in bf16/fp16, one SDPA call per
  request elsewhere. No padding, and no mask of (tokens x keys).
- Other prefills: transformers' SDPA function with the mask given.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

ATTENTION = "kubecua_engine_sdpa"  # no "flash" in the name: transformers would take its FA path


@dataclass(frozen=True)
class Packing:
    """Request i's queries are [cu_q[i], cu_q[i+1]) of the packed row, its keys [cu_k[i],
    cu_k[i+1]) of the packed K/V; the last query of a request sees all its keys (bottom-right
    causal: query j of n sees the prefix and new tokens 0..j)."""

    cu_q: torch.Tensor  # int32, on the device
    cu_k: torch.Tensor
    news: tuple[int, ...]
    totals: tuple[int, ...]  # m_i + n_i


_PACKING: contextvars.ContextVar[Packing | None] = contextvars.ContextVar(
    "kubecua_engine_packing", default=None
)


@contextlib.contextmanager
def packed(packing: Packing) -> Iterator[None]:
    """The text attention treats its input as `packing` meanwhile (this thread only)."""
    token = _PACKING.set(packing)
    try:
        yield
    finally:
        _PACKING.reset(token)


def _engine_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    packing = _PACKING.get()
    if packing is not None:
        return _packed_attention(query, key, value, packing, scaling), None
    if query.shape[2] != 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    b, h, _, d = query.shape
    q = query.reshape(b, key.shape[1], h // key.shape[1], d)  # head i uses KV head i // groups
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=attention_mask, scale=scaling
    )
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


def _packed_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, p: Packing, scaling: float | None
) -> torch.Tensor:
    """(1, H, T, D) packed queries, (1, H_kv, S, D) packed keys -> (1, T, H, D)."""
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
    if q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16):
        from torch.nn.attention.varlen import varlen_attn

        out: Any = varlen_attn(
            q, k.to(q.dtype), v.to(q.dtype), p.cu_q, p.cu_k, max(p.news), max(p.totals),
            scale=scaling, window_size=(-1, 0),
        )  # fmt: skip
        return out[None]
    outs = []
    for qi, ki, vi, n, s in zip(
        q.split(list(p.news)), k.split(list(p.totals)), v.split(list(p.totals)), p.news, p.totals,
        strict=True,
    ):  # fmt: skip
        rows = torch.arange(n, device=q.device)[:, None] + (s - n)
        mask = torch.arange(s, device=q.device)[None, :] <= rows
        o = torch.nn.functional.scaled_dot_product_attention(
            qi.transpose(0, 1)[None], ki.transpose(0, 1)[None].to(qi.dtype),
            vi.transpose(0, 1)[None].to(qi.dtype), attn_mask=mask, scale=scaling, enable_gqa=True,
        )  # fmt: skip
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs)[None]


AttentionInterface.register(ATTENTION, _engine_attention)


@contextlib.contextmanager
def engine_mode(model: torch.nn.Module) -> Iterator[None]:
    """The text attention through _engine_attention, and every module run eagerly (the learner's
    torch.compile wrappers set aside) meanwhile.

    Why eagerly: the cache adapters' update() indexes the KV by the attention module's
    `layer_idx`, an integer attribute that dynamo specialises, so each decoder layer compiled its
    own graph until dynamo's recompile limit (issue 31: a compiled synchronous loop never
    finished). The engine's decode step is replayed from CUDA graphs and its prefill is one large
    forward; neither needs the learner's fused kernels to be fast."""
    configs: dict[int, Any] = {
        id(m.config): m.config
        for m in model.modules()
        if hasattr(m, "layer_idx") and hasattr(m, "k_proj") and hasattr(m, "config")
    }
    before = {k: c._attn_implementation for k, c in configs.items()}
    compiled = [m for m in model.modules() if getattr(m, "_compiled_call_impl", None) is not None]
    wrappers = [m._compiled_call_impl for m in compiled]
    for c in configs.values():
        c._attn_implementation = ATTENTION
    for m in compiled:
        m._compiled_call_impl = None
    try:
        yield
    finally:
        for k, c in configs.items():
            c._attn_implementation = before[k]
        for m, w in zip(compiled, wrappers, strict=True):
            m._compiled_call_impl = w
