"""The prefix store: finished sequences' KV, kept so that the next turn of an episode prefills only
what it adds (an LRU bounded in bytes and sequences). A stored prefix is valid for a new prompt up
to the first differing token, never inside a screenshot, and only where every screenshot in it has
the same pixels (by digest)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass(eq=False)
class PrefixEntry:
    key: tuple[int, int]  # weights key (Scheduler.weights_key)
    tokens: torch.Tensor  # (L,) ids whose K/V are held
    digests: list[bytes]  # of the screenshots inside those tokens, in order
    grids: torch.Tensor | None  # (images, 3) their image_grid_thw
    k: torch.Tensor  # (layers, kv heads, L, head dim)
    v: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class PrefixStore:
    """LRU of finished sequences' KV, bounded in bytes and in sequences."""

    def __init__(self, max_bytes: int, max_sequences: int):
        self.max_bytes, self.max_sequences = max_bytes, max_sequences
        self.entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self.bytes = 0
        self._next = 0

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def best(
        self, key: tuple[int, int], ids: torch.Tensor, runs: list[tuple[int, int]],
        digests: list[bytes],
    ) -> tuple[PrefixEntry | None, int, int]:  # fmt: skip
        """(entry, reusable tokens, reusable images) of the longest valid shared prefix. At least
        one prompt token is always left to prefill (it gives the first logits); a prefix never
        ends inside a screenshot, and every screenshot in it must have the same pixels."""
        best: tuple[PrefixEntry | None, int, int] = (None, 0, 0)
        used = None
        for handle, e in self.entries.items():
            if e.key != key:
                continue
            n = min(len(e.tokens), len(ids) - 1)
            diff = (e.tokens[:n] != ids[:n]).nonzero()
            m = int(diff[0, 0]) if len(diff) else n
            images = 0
            for j, (start, end) in enumerate(runs):
                if end > m or j >= len(e.digests) or e.digests[j] != digests[j]:
                    m = min(m, start)  # cut before a screenshot that is partial or different
                    break
                images = j + 1
            if m > best[1]:
                best, used = (e, m, images), handle
        if used is not None:
            self.entries.move_to_end(used)
        return best

    def add(self, entry: PrefixEntry) -> None:
        """Store it, dropping entries it extends (their KV is a prefix of its KV), then the least
        recently used ones beyond the bounds."""
        if entry.nbytes > self.max_bytes or self.max_sequences <= 0:
            return
        for handle, e in list(self.entries.items()):
            n = len(e.tokens)
            if (
                e.key == entry.key
                and n <= len(entry.tokens)
                and e.digests == entry.digests[: len(e.digests)]
                and bool((entry.tokens[:n] == e.tokens).all())
            ):
                self._drop(handle)
        self.entries[self._next] = entry
        self._next += 1
        self.bytes += entry.nbytes
        while self.entries and (
            self.bytes > self.max_bytes or len(self.entries) > self.max_sequences
        ):
            self._drop(next(iter(self.entries)))

    def _drop(self, handle: int) -> None:
        self.bytes -= self.entries.pop(handle).nbytes
