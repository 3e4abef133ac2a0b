"""The engine interface: generate(prompt ids, images, sampling) -> ids, log-probs, finish reason.

Engines take token ids, never text, so the learner trains on exactly what was sampled. Behaviour
log-probs are log softmax(logits / temperature) of each sampled id, before top-p truncation (the
convention of sglang's return_logprob), which is what the learner recomputes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from PIL import Image


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()
    # Draws keyed by (seed, token index) instead of the engine's generator: the request samples
    # the same tokens whatever shares its batch (engines/embedded/keyed.py). None: the
    # generator's. The embedded engine's continuous path honours it; the others ignore it.
    seed: int | None = None


def request_seed(*parts: object) -> int:
    """A request's seed from what names it (the run's seed, task, episode key, turn): the same
    in every process, as Python's hash() of a str is not.

    >>> request_seed(0, "task", "s0001-g00-e03", 2) == request_seed(0, "task", "s0001-g00-e03", 2)
    True
    """
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # 63 bits: fits int64


def seeded(sampling: SamplingParams, seed: int | None, *parts: object) -> SamplingParams:
    """`sampling` keyed by (seed, *parts); unchanged without a seed or when greedy."""
    if seed is None or sampling.temperature <= 0:
        return sampling
    return replace(sampling, seed=request_seed(seed, *parts))


@dataclass(frozen=True)
class Generation:
    token_ids: list[int]  # sampled ids, stop token included when it was sampled
    logprobs: list[float]  # behaviour log-prob of each sampled id, same length
    finish_reason: Literal["stop", "length"]
    policy_version: int = 0  # the step whose weights generated it (Policy.version)


class EngineError(RuntimeError):
    """The engine could not serve a request (bad input or a failed server)."""


class Engine(Protocol):
    async def generate(
        self, prompt_ids: list[int], images: list[Image.Image], sampling: SamplingParams
    ) -> Generation: ...

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None: ...

    def forget_cache(self, timeout: float = 0.0) -> bool:
        """Free cached KV the engine holds for later turns (before a learner step that needs the
        memory); timeout > 0 waits up to that long; True once done (or nothing was held)."""
        ...

    async def close(self) -> None: ...


def cut_at_stop(
    ids: list[int], logprobs: list[float], stop_ids: tuple[int, ...], max_new_tokens: int
) -> Generation:
    """Keep ids up to and including the first stop id; 'length' when none was sampled.

    Example: ids [5, 9, 2, 0], stop (2,) -> [5, 9, 2], 'stop'; ids [5, 9], stop (2,) -> 'length'.
    """
    for i, tok in enumerate(ids[:max_new_tokens]):
        if tok in stop_ids:
            return Generation(ids[: i + 1], logprobs[: i + 1], "stop")
    n = min(len(ids), max_new_tokens)
    return Generation(ids[:n], logprobs[:n], "length")
