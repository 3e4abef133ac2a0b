"""The embedded engine's records of a request: as queued (Request), as it runs (Seq), as it is
planned for prefill (Plan), and as it is reported (EngineRecord)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch
from PIL import Image

from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.embedded.prefix_store import PrefixEntry


@dataclass(eq=False)  # identity, not field, equality
class Request:
    prompt_ids: list[int]
    images: list[Image.Image]
    sampling: SamplingParams
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop = field(repr=False)
    # Continuous path: filled in the caller's thread before the request is queued, so the worker
    # (which holds the GPU) does not wait on the CPU for them (Screenshots.prepare).
    digests: list[bytes] | None = field(default=None, repr=False)
    prepared: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    def resolve(self, result: Generation | BaseException) -> None:
        def _set() -> None:
            if self.future.done():
                return  # the caller was cancelled (episode timeout)
            if isinstance(result, BaseException):
                self.future.set_exception(result)
            else:
                self.future.set_result(result)

        self.loop.call_soon_threadsafe(_set)


@dataclass
class EngineRecord:
    """One request's path through the engine, for tests and metrics. Steps count decode steps."""

    request: int  # arrival order
    prompt_tokens: int
    reused_tokens: int = 0  # prompt tokens whose KV came from the prefix store
    prefilled_tokens: int = 0  # prompt tokens run through the model
    images_encoded: int = 0  # screenshots run through the vision tower
    new_tokens: int = 0
    join_step: int = -1  # decode steps run before it joined the batch
    finish_step: int = -1  # decode steps run when it left
    running_at_join: int = 0  # sequences already decoding when it joined
    finish_reason: str = ""
    policy_version: int = 0
    restarts: int = 0  # times the weights changed under it
    prefill_batch: int = 0  # requests prefilled in the same forward as this one


@dataclass(eq=False)
class Seq:
    """A running (or waiting) request: its ids so far and where its KV stands."""

    req: Request
    rec: EngineRecord
    digests: list[bytes]
    ids: list[int] = field(default_factory=list)  # prompt, then sampled ids
    grids: torch.Tensor | None = None
    delta: int = 0  # M-RoPE position of token i is i + delta after the last screenshot
    cached: int = 0  # leading ids whose K/V are in the row
    gen: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


@dataclass(eq=False)
class Plan:
    """A request ready to prefill: its ids, the reused prefix (m ids from entry), its 3-D
    positions and the pixels of the screenshots it adds."""

    seq: Seq
    ids: torch.Tensor
    m: int
    entry: PrefixEntry | None
    positions: torch.Tensor
    pixel_values: torch.Tensor | None
    new_grids: torch.Tensor | None
    new_images: int

    @property
    def new_tokens(self) -> int:
        return len(self.ids) - self.m
