"""The learner's copy of the next sample's pixels during this sample's kernels
(speedups/prefetch.py): the same step, bit for bit, with and without it; a no-op on the CPU.
The CUDA test runs on the GPU machine (`python3 -m pytest -q --noconftest` this file)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import pytest
import torch

from bench.shapes import bench_policy, build_model, synthetic_sample
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.speedups.prefetch import PixelPrefetch
from kubecua_trainer.tokens import Sample

ALGO = AlgorithmConfig(learning_rate=1e-3)
# cuBLAS's deterministic workspace, read when its first handle is made (the CUDA test's first use)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def test_without_cuda_the_sample_is_left_as_it_is() -> None:
    model = build_model("tiny_qwen2_5_vl", "cpu")
    sample = synthetic_sample(model, 2, 112, 112)
    prefetch = PixelPrefetch(torch.device("cpu"))
    prefetch.start(sample)
    assert prefetch.take(sample) is sample


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned copies, streams)")
def test_prefetched_pixels_give_the_same_steps_bit_for_bit() -> None:
    """Three Learner steps over three 2-screenshot samples of the tiny Qwen2.5-VL in bf16 on the
    GPU, with the prefetch and without it: the same losses and bitwise the same weights; with it,
    every sample after the first of a step reached the forward with its pixels on the GPU."""
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)  # the two runs' backward sums in one order
    try:
        runs = _steps_with_and_without()
    finally:
        torch.use_deterministic_algorithms(False)
    (plain_losses, plain, plain_taken), (losses, weights, taken) = runs
    assert plain_taken == ["cpu"] * 9
    assert taken == ["cpu", "cuda", "cuda"] * 3
    assert plain_losses[2] != plain_losses[0]  # the weights moved
    assert losses == plain_losses
    for a, b in zip(plain, weights, strict=True):
        assert torch.equal(a, b)


def _steps_with_and_without() -> list[tuple[list[float], list[torch.Tensor], list[str]]]:
    base = build_model("tiny_qwen2_5_vl", "cuda")
    samples = [synthetic_sample(base, 2, 112, 112, i) for i in range(3)]
    runs = []
    for enabled in (False, True):
        model = copy.deepcopy(base)
        learner = Learner(bench_policy(model), ALGO)
        learner.prefetch.enabled = enabled
        taken: list[str] = []
        take = learner.prefetch.take

        def spy(
            s: Sample, take: Callable[[Sample], Sample] = take, taken: list[str] = taken
        ) -> Sample:
            out = take(s)
            assert out.pixel_values is not None
            taken.append(out.pixel_values.device.type)
            return out

        learner.prefetch.take = spy  # type: ignore[method-assign,assignment]
        losses = [learner.step(samples)["loss"] for _ in range(3)]
        runs.append((losses, [p.detach().clone() for p in model.parameters()], taken))
    return runs
