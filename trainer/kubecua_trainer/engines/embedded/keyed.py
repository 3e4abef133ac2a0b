"""Draws keyed by (seed, token index): the same key gives the same uniforms whatever else is in
the batch, on any device, with no generator state.

Why: a shared generator hands its draws out in batch order, and which requests share a decode
step depends on when they arrived, so two runs of one seed sampled differently after their first
step (docs/benchmarks.md, 2026-11-29 night: 15 of 27 offline runs with identical warm-ups ended
GRPO elsewhere). Keyed draws make a request's tokens a function of its logits and its key; the
logits themselves still move by about 1e-6 with the batch's make-up (fp32, CPU), which flips a
token only when a draw falls that close to a boundary.

The uniforms come from SplitMix64 (Steele, Lea and Flood 2014) of a counter: key, then vocabulary
index, mixed twice; int64 tensors wrap on overflow, and shifts are made logical by masking.
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


def mix(x: int) -> int:
    """SplitMix64's finaliser on a Python int (the key's own hash).

    >>> mix(0), mix(1) != mix(0)
    (16294208416658607535, True)
    """
    z = (x + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def _shr(z: torch.Tensor, k: int) -> torch.Tensor:
    return (z >> k) & ((1 << (64 - k)) - 1)  # logical: int64's >> copies the sign bit


def _mix_tensor(z: torch.Tensor) -> torch.Tensor:
    z = z + _signed(_GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(_M1)
    z = (z ^ _shr(z, 27)) * _signed(_M2)
    return z ^ _shr(z, 31)


def key_of(seed: int, index: int) -> int:
    """One row's key: its request's seed and the index of the token it samples."""
    return mix(mix(seed & _MASK64) ^ (index & _MASK64))


def uniforms(keys: list[int], vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[len(keys), vocab] float64 uniforms in (0, 1), row r a function of keys[r] alone."""
    base = torch.tensor([_signed(k) for k in keys], dtype=torch.int64, device=device)
    col = torch.arange(vocab, dtype=torch.int64, device=device) * _signed(_GOLDEN)
    z = _mix_tensor(base[:, None] + col[None, :])
    return (_shr(z, 11).double() + 0.5) * 2.0**-53


def gumbel_argmax(scores: torch.Tensor, keys: list[int]) -> torch.Tensor:
    """One id per row drawn from softmax(scores) (-inf: never) by the Gumbel-max trick with the
    rows' keyed uniforms: argmax(scores - log(-log u))."""
    u = uniforms(keys, scores.shape[-1], scores.device)
    noise = -torch.log(-torch.log(u))
    return (scores.double() + noise).argmax(dim=-1)
