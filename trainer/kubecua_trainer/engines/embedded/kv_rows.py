"""The running rows' KV: one buffer of shape (layers, rows, kv heads, capacity, head dim), row i's
tokens at [0, n_i) of its row, each row at its own length (transformers' StaticCache has one
length for the whole batch, so rows joining and leaving at different lengths cannot share it)."""

from __future__ import annotations

import torch


def round_up(n: int, k: int) -> int:
    return -(-n // k) * k


class KVRows:
    """K and V of the running rows, (layers, rows, kv heads, capacity, head dim); row i at [0, n_i).

    Capacity grows by reallocation (rare: a request reserves its prompt plus max_new_tokens when it
    joins); rows are kept dense, a leaving row's slot takes the last row.
    """

    def __init__(self, layers: int, heads: int, dim: int, dtype: torch.dtype, device: torch.device):
        self.shape = (layers, heads, dim)
        self.dtype, self.device = dtype, device
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.allocations = 0  # bumped by every (re)allocation and release: graphs check it

    def reserve(self, rows: int, length: int, used: list[int], max_rows: int) -> None:
        cap_rows = 0 if self.k is None else self.k.shape[1]
        cap_len = 0 if self.k is None else self.k.shape[3]
        if rows <= cap_rows and length <= cap_len:
            return
        new_rows = max(cap_rows, min(max_rows, 1 << (rows - 1).bit_length()), rows)
        # A quarter of headroom: fewer reallocations (and CUDA graph recaptures) as turns grow.
        new_len = max(round_up(max(length, 1), 256), round_up(cap_len * 5 // 4, 256))
        layers, heads, dim = self.shape
        shape = (layers, new_rows, heads, new_len, dim)
        # Zeros, not empty: masked-out slots still enter the attention's matmuls, and stale
        # memory may hold NaN bit patterns (0 * NaN is NaN).
        k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if self.k is not None and self.v is not None:
            for r, n in enumerate(used):
                k[:, r, :, :n] = self.k[:, r, :, :n]
                v[:, r, :, :n] = self.v[:, r, :, :n]
        self.k, self.v = k, v
        self.allocations += 1

    def release(self) -> None:
        self.k = self.v = None
        self.allocations += 1

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None or self.v is None:
            raise RuntimeError("KV rows used before reserve()")
        return self.k, self.v

    def move(self, src: int, dst: int, length: int) -> None:
        k, v = self.tensors()
        k[:, dst, :, :length] = k[:, src, :, :length]
        v[:, dst, :, :length] = v[:, src, :, :length]

    def nbytes(self) -> int:
        return 0 if self.k is None or self.v is None else self.k.nbytes + self.v.nbytes
