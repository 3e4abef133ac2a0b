"""The model runner: the engine's forwards on the policy's module. It owns the running rows' KV
(kv_rows.KVRows) and the CUDA graphs of the decode step, and turns sequences into the model's
inputs: explicit 3-D M-RoPE positions from the model's own get_rope_index (per sequence, kept as a
per-row delta for decoding), the cache adapter of each kind of forward, and the attention layout.

Prefill of the requests that join together runs as one forward, packed by default (their new
tokens back to back in one row, variable-length attention: no padding, attention.Packing), or
right-padded to one length with a mask (packed=False, kept as the reference the packed path is
tested against). A single request with nothing reused runs SDPA's own causal path either way.
"""

from __future__ import annotations

from typing import Any

import torch

from kubecua_trainer.engines.embedded.attention import Packing, packed
from kubecua_trainer.engines.embedded.cuda_graphs import DecodeGraphs
from kubecua_trainer.engines.embedded.kv_caches import (
    BatchPrefillCache,
    DecodeCache,
    PackedPrefillCache,
    PrefillCache,
)
from kubecua_trainer.engines.embedded.kv_rows import KVRows, round_up
from kubecua_trainer.engines.embedded.sequence import Plan, Seq
from kubecua_trainer.model import Policy


def decode_forward(
    model: Any, kv: KVRows, tokens: torch.Tensor, lens: torch.Tensor, delta: torch.Tensor,
    width: int, params: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:  # fmt: skip
    """One decode step of every row: (rows, 1) ids at positions lens + delta -> (rows, vocab)
    logits. params: stand-in tensors for some parameters (torch.func.functional_call)."""
    mask = (torch.arange(width, device=lens.device)[None, :] <= lens[:, None])[:, None, None, :]
    kwargs = {
        "input_ids": tokens,
        "position_ids": (lens + delta)[None, :, None].expand(3, -1, -1),
        "attention_mask": mask,
        "past_key_values": DecodeCache(kv, lens, width),
        "use_cache": True,
    }
    if params is None:
        out = model(**kwargs)
    else:
        out = torch.func.functional_call(model, params, (), kwargs, tie_weights=False, strict=False)
    return out.logits[:, -1]


class ModelRunner:
    def __init__(self, policy: Policy, max_rows: int, cuda_graphs: bool, packed: bool = True):
        self.policy = policy
        self.max_rows = max_rows
        self.packed = packed
        cfg: Any = policy.model.config
        text = cfg.get_text_config()
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.kv = KVRows(
            text.num_hidden_layers, text.num_key_value_heads, head_dim, policy.dtype, policy.device
        )
        on_cuda = cuda_graphs and policy.device.type == "cuda"
        self.graphs = DecodeGraphs(policy, self.kv, decode_forward) if on_cuda else None

    def positions(self, ids: torch.Tensor, seq: Seq) -> torch.Tensor:
        """(3, L) M-RoPE positions from the model's own get_rope_index; sets seq.delta."""
        if seq.grids is None:
            seq.delta = 0
            return torch.arange(len(ids))[None].expand(3, -1)
        inner: Any = self.policy.model.model
        pos, delta = inner.get_rope_index(
            ids[None],
            mm_token_type_ids=(ids[None] == self.policy.image_pad_id).int(),
            image_grid_thw=seq.grids,
        )
        seq.delta = int(delta.reshape(-1)[0])
        return pos[:, 0].cpu()

    def prefill(self, plans: list[Plan], rows: list[Seq]) -> torch.Tensor:
        """One forward of the plans' new tokens into rows [len(rows), len(rows) + R) (their
        reused prefixes copied in first); (R, vocab) logits at each plan's last new token."""
        dev = self.policy.device
        row0, r = len(rows), len(plans)
        ns = [p.new_tokens for p in plans]
        n = max(ns)
        total = max(max(len(p.ids) + p.seq.req.sampling.max_new_tokens, p.m + n) for p in plans)
        self.kv.reserve(row0 + r, total, [s.cached for s in rows], self.max_rows)
        k, v = self.kv.tensors()
        for i, p in enumerate(plans):
            if p.entry is not None and p.m:
                k[:, row0 + i, :, : p.m] = p.entry.k[:, :, : p.m]
                v[:, row0 + i, :, : p.m] = p.entry.v[:, :, : p.m]
        if r == 1 and not plans[0].m:  # SDPA's own causal path
            (p,) = plans
            cache: Any = PrefillCache(self.kv, row0, 0, n)
            inputs = self._inputs(p.ids[None], p.positions[:, None], None, plans)
            return self._forward(inputs, cache, 1)[:, -1]
        if self.packed:
            return self._packed(plans, row0)
        if r == 1:  # causal over the suffix, full over the reused prefix; width aligned for SDPA
            (p,) = plans
            width = min(round_up(p.m + n, 64), k.shape[3])
            q = torch.arange(n, device=dev)[:, None] + p.m
            mask = (torch.arange(width, device=dev)[None, :] <= q)[None, None]
            cache = PrefillCache(self.kv, row0, p.m, width)
            inputs = self._inputs(p.ids[None, p.m :], p.positions[:, None, p.m :], mask, plans)
            return self._forward(inputs, cache, 1)[:, -1]
        return self._padded(plans, row0)

    def _padded(self, plans: list[Plan], row0: int) -> torch.Tensor:
        """Right-padded rows, each causal over its own prefix and new tokens."""
        dev = self.policy.device
        r, ns = len(plans), [p.new_tokens for p in plans]
        n = max(ns)
        starts = torch.tensor([p.m for p in plans], device=dev)
        width = min(round_up(int(starts.max()) + n, 64), self.kv.tensors()[0].shape[3])
        q = starts[:, None, None] + torch.arange(n, device=dev)[None, :, None]
        mask = (torch.arange(width, device=dev)[None, None, :] <= q)[:, None]
        ids = torch.zeros((r, n), dtype=torch.long)  # id 0 pads: never an image pad
        positions = torch.zeros((3, r, n), dtype=torch.long)
        for i, (p, ni) in enumerate(zip(plans, ns, strict=True)):
            ids[i, :ni] = p.ids[p.m :]
            positions[:, i, :ni] = p.positions[:, p.m :]
            # the padding continues the row's positions (its outputs are never read)
            positions[:, i, ni:] = p.positions[:, -1:] + torch.arange(1, n - ni + 1)
        cache = BatchPrefillCache(self.kv, row0, starts, n, width)
        keep = torch.tensor(sorted(set(ni - 1 for ni in ns)), device=dev)
        logits = self._forward(self._inputs(ids, positions, mask, plans), cache, keep)
        at = {int(j): c for c, j in enumerate(keep.tolist())}  # row i's last new token
        cols = torch.tensor([at[ni - 1] for ni in ns], device=dev)
        return logits[torch.arange(r, device=dev), cols]

    def _packed(self, plans: list[Plan], row0: int) -> torch.Tensor:
        """Every plan's new tokens back to back in one row; variable-length attention."""
        dev = self.policy.device
        ns = [p.new_tokens for p in plans]
        totals = [p.m + ni for p, ni in zip(plans, ns, strict=True)]
        ids = torch.cat([p.ids[p.m :] for p in plans])[None]
        positions = torch.cat([p.positions[:, p.m :] for p in plans], dim=1)[:, None]
        cu_q = torch.tensor([0, *ns]).cumsum(0)
        cu_k = torch.tensor([0, *totals]).cumsum(0)
        packing = Packing(
            cu_q.to(dev, torch.int32), cu_k.to(dev, torch.int32), tuple(ns), tuple(totals)
        )
        rows = [row0 + i for i in range(len(plans))]
        cache = PackedPrefillCache(self.kv, rows, [p.m for p in plans], ns, dev)
        marker = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=dev)  # a 4-D mask: kept as is
        keep = (cu_q[1:] - 1).to(dev)
        with packed(packing):
            return self._forward(self._inputs(ids, positions, marker, plans), cache, keep)[0]

    def _inputs(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
        plans: list[Plan],
    ) -> dict[str, Any]:  # fmt: skip
        dev, pad = self.policy.device, self.policy.image_pad_id
        inputs: dict[str, Any] = {
            "input_ids": ids.to(dev),
            "position_ids": positions.to(dev),
            "mm_token_type_ids": (ids == pad).long().to(dev),
            "attention_mask": mask,
        }
        pixels = [p.pixel_values for p in plans if p.pixel_values is not None]
        if pixels:  # each new screenshot once, all of them in one pass of the vision tower
            inputs["pixel_values"] = torch.cat(pixels).to(dev)
            grids = [p.new_grids for p in plans if p.new_grids is not None]
            inputs["image_grid_thw"] = torch.cat(grids).to(dev)
        return inputs

    def _forward(self, inputs: dict[str, Any], cache: Any, keep: int | torch.Tensor) -> Any:
        model = self.policy.model
        return model(**inputs, past_key_values=cache, use_cache=True, logits_to_keep=keep).logits

    def decode(self, rows: list[Seq]) -> torch.Tensor:
        """(len(rows), vocab) logits of one decode step: from a CUDA graph where there is one."""
        logits = self.graphs.step(rows) if self.graphs is not None else None
        if logits is not None:
            return logits
        dev = self.policy.device
        lens_list = [s.cached for s in rows]
        lens = torch.tensor(lens_list, device=dev)
        width = min(round_up(max(lens_list) + 1, 64), self.kv.tensors()[0].shape[3])
        tokens = torch.tensor([[s.ids[-1]] for s in rows], device=dev)
        delta = torch.tensor([s.delta for s in rows], device=dev)
        return decode_forward(self.policy.model, self.kv, tokens, lens, delta, width)

    def release(self, graphs_too: bool = False) -> None:
        self.kv.release()
        if graphs_too and self.graphs is not None:
            self.graphs.clear()
