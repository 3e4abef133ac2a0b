"""The decode step replayed from CUDA graphs (CUDA only; HFEngine(cuda_graphs=True), which the
trainer turns on wherever the policy is on CUDA): one graph per (row bucket, KV buffer), rows
padded to a power of two, attention over the whole buffer (masked).

Why a bf16 copy of the text model's Linear weights: under autocast the fp32 masters are cast to
bf16 at every use, and a graph would replay those casts (for a 3B model about 18 GB of memory
traffic a step). The copy holds exactly what autocast's cast gives (round to nearest), refreshed in
place when the weights change, so results are unchanged. Capture runs with autocast's cast cache
off, so no graph keeps a pointer into that cache. Any failure to capture turns graphs off for the
engine's life and decoding goes on eagerly.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import torch

from kubecua_trainer.engines.embedded.kv_rows import KVRows
from kubecua_trainer.engines.embedded.sequence import Seq
from kubecua_trainer.model import Policy

log = logging.getLogger(__name__)

# (model, kv, tokens, lens, deltas, width, params) -> logits: model_runner.decode_forward
DecodeForward = Callable[..., torch.Tensor]


class DecodeGraphs:
    def __init__(self, policy: Policy, kv: KVRows, forward: DecodeForward):
        self.policy, self.kv, self.forward = policy, kv, forward
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.static: dict[int, torch.Tensor] = {}  # rows -> (3, rows) ids, lens, deltas
        self.buffer: int | None = None  # KVRows.allocations of the buffer the graphs write into
        self.pool: Any = None
        self.params: dict[str, torch.Tensor] = {}
        self.broken = False
        self.captures = 0
        # Held around a capture: another thread's device-wide sync (a learner stepping meanwhile,
        # inductor's autotuning, the offloaded AdamW) voids a capture and fails itself
        # (GpuShare.capture_fence keeps them apart).
        self.fence: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext

    def refresh_weights(self) -> None:
        """(Re)fill the bf16 copies from the current weights, in place (graphs keep pointers)."""
        if self.policy.dtype != torch.bfloat16:
            self.params = {}
            return
        for name, module in self.policy.model.named_modules():
            if not isinstance(module, torch.nn.Linear) or "visual" in name.split("."):
                continue
            for pname, p in module.named_parameters(recurse=False):
                if p.dtype != torch.float32:
                    continue
                full = f"{name}.{pname}" if name else pname
                held = self.params.get(full)
                if held is None or held.shape != p.shape:
                    self.params[full] = p.detach().to(torch.bfloat16)
                else:
                    held.copy_(p.detach())

    def clear(self) -> None:
        self.graphs.clear()
        self.static.clear()
        self.buffer = None
        # A private pool dies with the last graph that used it: a capture into its handle after
        # that trips the caching allocator's assertions (seen on an H100), so start a new one.
        self.pool = None

    def step(self, rows: list[Seq]) -> torch.Tensor | None:
        """(len(rows), vocab) logits from a graph; None when graphs are off (decode eagerly)."""
        if self.broken:
            return None
        k, _ = self.kv.tensors()
        if self.buffer != self.kv.allocations:  # reallocated: the graphs wrote into the old one
            self.clear()
            self.buffer = self.kv.allocations
        n = len(rows)
        bucket = min(1 << (n - 1).bit_length(), k.shape[1])
        static = self.static.get(bucket)
        if static is None:
            static = self.static[bucket] = torch.zeros(
                (3, bucket), dtype=torch.long, device=k.device
            )
        pad = bucket - n  # padding rows: id 0 at position 0 of unused rows, attending to it
        host = torch.tensor(
            [
                [s.ids[-1] for s in rows] + [0] * pad,
                [s.cached for s in rows] + [0] * pad,
                [s.delta for s in rows] + [0] * pad,
            ]
        )
        static.copy_(host)
        entry = self.graphs.get((bucket, k.shape[3]))
        if entry is None:
            try:
                with self.fence():
                    entry = self._capture(static, k.shape[3])
            except Exception:
                log.exception("CUDA graph capture failed; decoding eagerly from now on")
                self.broken = True
                self.clear()
                return None
            self.graphs[(bucket, k.shape[3])] = entry
        graph, logits = entry
        graph.replay()
        return logits[:n]

    def _forward(self, static: torch.Tensor, width: int) -> torch.Tensor:
        bf16 = self.policy.dtype == torch.bfloat16  # the policy's autocast, minus its cache
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            return self.forward(
                self.policy.model, self.kv, static[0][:, None], static[1], static[2], width,
                self.params or None,
            )  # fmt: skip

    def _capture(
        self, static: torch.Tensor, width: int
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        # Warm-up on a side stream (as torch.cuda.graphs asks); it writes the same K/V the real
        # step writes, at the same slots, so it changes nothing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._forward(static, width)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls of other threads (the event loop's) must not void the capture.
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            logits = self._forward(static, width)
        self.captures += 1
        return graph, logits
