"""The next sample's screenshots on their way to the GPU while this sample's kernels run.

Why: a learner sample's pixels are fp32 on the host (8 screenshots of 1260x700: 36,000 patches of
1,176 values, 162 MiB), and model_inputs copied them to the GPU at the start of each forward, from
pageable memory: no kernel of the sample could start until the copy was done, and the previous
sample's last kernels had already finished (the learner reads its loss terms back at the end of
each sample). Here the copy of sample i+1 starts after sample i's backward is queued: the host
pins the pixels while the GPU computes, a copy stream moves them, and the compute stream waits
for that copy only when sample i+1's forward needs them. The values are the same tensor, so the
step's bits are the same.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # types only: tokens imports the speed-ups' layer, not the other way round
    from kubecua_trainer.tokens import Sample

# Off by default: bitwise the same step on CUDA (trainer/tests/test_learner_prefetch.py passed on an
# H200, 2026-11-29), but its speed not yet measured apart (docs/benchmarks.md; bench-loop:
# --prefetch-pixels, bench.learner_profile's prefetch stage).
PREFETCH_PIXELS = False


class PixelPrefetch:
    """start(sample) begins the copy; take(sample) returns the sample with its pixels on the GPU
    (the copy waited for on the current stream) or the sample itself where none was started."""

    def __init__(self, device: torch.device):
        self.device = device
        self.enabled = PREFETCH_PIXELS  # (on a CUDA device; a no-op elsewhere)
        self._stream: torch.cuda.Stream | None = None
        self._staged: tuple[int, torch.Tensor, torch.cuda.Event] | None = None

    def start(self, sample: Sample | None) -> None:
        if not self.enabled or self.device.type != "cuda" or sample is None:
            return
        if sample.pixel_values is None:
            return
        if sample.pixel_values.device.type == "cuda":
            return
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        pinned = sample.pixel_values.pin_memory()
        # the copy stream allocates from its own pool, so it needs not wait for the compute
        # stream; take() makes the compute stream wait for the copy
        with torch.cuda.stream(self._stream):
            on_gpu = pinned.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        self._staged = (id(sample), on_gpu, done)

    def take(self, sample: Sample) -> Sample:
        staged, self._staged = self._staged, None
        if staged is None or staged[0] != id(sample):
            return sample
        _, on_gpu, done = staged
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        on_gpu.record_stream(current)  # allocated on the copy stream, used on this one
        return dataclasses.replace(sample, pixel_values=on_gpu)
