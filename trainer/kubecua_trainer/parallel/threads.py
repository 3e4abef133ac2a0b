"""The worker threads the trainer hands CUDA work to, each on its process's GPU first.

CUDA's current device belongs to the host thread, and a new thread starts on GPU 0. Under
torchrun every process but the first owns another GPU (Dist.device(): cuda:LOCAL_RANK), and only
its main thread was set to it (distributed.init_from_env). Kernels on a tensor still run on the
tensor's GPU, but whatever names no tensor takes the current device: a CUDA graph captures on
the current device's stream, torch.cuda.synchronize() and torch.cuda.Stream() mean GPU 0. On 2 x
H200 (2026-11-28) the generating process of a disaggregated run (cuda:1) captured its decode
graphs from the engine's thread on GPU 0's stream while the forward ran on cuda:1, and the
capture failed ("operation not permitted when stream is capturing": an allocation inside a
capture is refused; our reading, to be confirmed on 2 GPUs). So
every thread that runs CUDA work sets the device first: the engine's worker (engines/hf.py), and
the calls the event loop hands to asyncio's threads (to_thread_on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def use_device(device: torch.device) -> None:
    """Make `device` this thread's current CUDA device. A no-op off CUDA, and for a device
    without an index (one process: every thread's current device is already GPU 0)."""
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)


async def to_thread_on(device: torch.device, fn: Callable[..., T], /, *args: Any) -> T:
    """asyncio.to_thread(fn, *args), the worker thread on `device` first (a pooled thread keeps
    whatever device its last call set)."""

    def call() -> T:
        use_device(device)
        return fn(*args)

    return await asyncio.to_thread(call)
