"""Cache adapters: the `past_key_values` object the model's attention layers call `update` on,
one per kind of forward, each writing the new K/V into the running rows (kv_rows.KVRows) and
returning what the attention should see.

Why `update` reads its layer's K/V from `kv.k[layer_idx]` at call time and holds no per-layer
state: the adapters live for one forward. Under torch.compile a per-layer integer would make
dynamo specialise each decoder layer (issue 31); the engine therefore runs its forwards on the
eager modules (attention.engine_mode), whatever the learner compiled.
"""

from __future__ import annotations

from typing import Any

import torch

from kubecua_trainer.engines.embedded.kv_rows import KVRows


class PrefillCache:
    """One row's prefill: new K/V go to [start, start + n) of the row; attention sees [0, width)
    (width >= start + n: the mask hides the rest)."""

    is_compileable = False

    def __init__(self, kv: KVRows, row: int, start: int, width: int):
        self.kv, self.row, self.start, self.width = kv, row, start, width

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        end = self.start + key_states.shape[2]
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx, self.row], vs[layer_idx, self.row]
        k[:, self.start : end] = key_states[0]
        v[:, self.start : end] = value_states[0]
        width = max(end, self.width)
        return k[None, :, :width], v[None, :, :width]


class BatchPrefillCache:
    """A padded prefill of rows [row0, row0 + R): row r's N (right-padded) new K/V go to
    [starts[r], starts[r] + N) of its row; attention sees [0, width) of every row, masked per
    row. The padding's K/V land past the row's length, where the decode mask hides them until a
    decode step overwrites them."""

    is_compileable = False

    def __init__(self, kv: KVRows, row0: int, starts: torch.Tensor, n: int, width: int):
        self.kv, self.row0, self.width = kv, row0, width
        self.min_start = int(starts.min())
        r = len(starts)
        self.rows = (row0 + torch.arange(r, device=starts.device))[:, None].expand(r, n)
        self.slots = starts[:, None] + torch.arange(n, device=starts.device)[None, :]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.min_start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx], vs[layer_idx]
        # (R, heads, N, dim) -> (R, N, heads, dim): advanced indices (rows, slots) come first
        k[self.rows, :, self.slots] = key_states.transpose(1, 2).to(k.dtype)
        v[self.rows, :, self.slots] = value_states.transpose(1, 2).to(v.dtype)
        end = self.row0 + len(self.rows)
        return k[self.row0 : end, :, : self.width], v[self.row0 : end, :, : self.width]


class PackedPrefillCache:
    """A packed prefill (one row of every joining request's new tokens, back to back, no padding):
    request i's n_i new K/V go to [m_i, m_i + n_i) of its KV row; attention sees, per request, its
    reused prefix and its new tokens, packed as (1, kv heads, sum of (m_i + n_i), dim) in request
    order (the layout of attention.Packing's cu_k)."""

    is_compileable = False

    def __init__(self, kv: KVRows, rows: list[int], starts: list[int], news: list[int], dev: Any):
        self.kv = kv
        self.min_start = min(starts)
        # where each new token goes, and where each attended token comes from
        self.new_rows = torch.tensor([r for r, n in zip(rows, news, strict=True) for _ in range(n)])
        self.new_slots = torch.cat(
            [torch.arange(m, m + n) for m, n in zip(starts, news, strict=True)]
        )
        self.all_rows = torch.tensor(
            [r for r, m, n in zip(rows, starts, news, strict=True) for _ in range(m + n)]
        )
        self.all_slots = torch.cat([torch.arange(m + n) for m, n in zip(starts, news, strict=True)])
        self.new_rows, self.new_slots = self.new_rows.to(dev), self.new_slots.to(dev)
        self.all_rows, self.all_slots = self.all_rows.to(dev), self.all_slots.to(dev)
        self.fresh = all(m == 0 for m in starts)  # nothing reused: attend to the new K/V as given

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.min_start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx], vs[layer_idx]
        new_k = key_states[0].transpose(0, 1).to(k.dtype)  # (T, heads, dim)
        new_v = value_states[0].transpose(0, 1).to(v.dtype)
        k[self.new_rows, :, self.new_slots] = new_k
        v[self.new_rows, :, self.new_slots] = new_v
        if self.fresh:
            return new_k.transpose(0, 1)[None], new_v.transpose(0, 1)[None]
        packed_k = k[self.all_rows, :, self.all_slots]  # (S, heads, dim)
        packed_v = v[self.all_rows, :, self.all_slots]
        return packed_k.transpose(0, 1)[None], packed_v.transpose(0, 1)[None]


class DecodeCache:
    """A decode step: row i's new K/V go to index lens[i]; attention sees [0, width) of every row,
    masked to each row's own length."""

    is_compileable = False

    def __init__(self, kv: KVRows, lens: torch.Tensor, width: int):
        self.kv, self.lens, self.width = kv, lens, width
        self.rows = torch.arange(len(lens), device=lens.device)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width - 1

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx], vs[layer_idx]
        k[self.rows, :, self.lens] = key_states[:, :, 0].to(k.dtype)
        v[self.rows, :, self.lens] = value_states[:, :, 0].to(v.dtype)
        n = len(self.lens)
        return k[:n, :, : self.width], v[:n, :, : self.width]
