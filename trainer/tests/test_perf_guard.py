"""Correctness guard for the learner's performance paths (kubecua_trainer.speedups): on the tiny
model, the optimised loss and gradients (chunked log-probs, selective checkpointing, the vision
varlen-attention switch) equal the plain implementation's (full-vocabulary logits, log-softmax,
no checkpointing) within 1e-5 relative in fp32 on the CPU, and within 2e-2 in bf16 on CUDA
(rounding of bf16 activations; the CUDA test runs on the GPU machine). MasterAdamW's step equals
torch's AdamW, and its state survives a state_dict round trip."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from bench.flops import Shape, train_flops, vision_attention_flops
from bench.shapes import bench_policy, build_model, image_grid, synthetic_sample
from bench.testing.images import screenshot
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import Generation
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import model_inputs
from kubecua_trainer.learning.loss import LossCoefficients, token_loss
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.speedups.attention import use_varlen_vision_attention
from kubecua_trainer.speedups.checkpointing import set_checkpointing, spread
from kubecua_trainer.speedups.optimizer import MasterAdamW, _slices
from kubecua_trainer.tiny_models import build_tiny_model
from kubecua_trainer.tokens import Conversation, Sample

ALGO = AlgorithmConfig(learning_rate=1e-3)  # clip 0.2/0.28, TIS cap 2, PPO, no KL


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Own copy of conftest's fixture, so the GPU machine (no kubecua_testkit there) can run this
    file alone with `pytest --noconftest`."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-perf"), "qwen2_5_vl")


def two_turn_sample(policy: Policy, advantage: float) -> Sample:
    conv = Conversation(policy, "sys", 56 * 56 * 4)
    for turn in range(2):
        conv.add_user(f"turn {turn}", screenshot(turn, (112, 84)))
        ids = [(turn * 17 + i * 13) % 400 + 20 for i in range(6)]
        conv.add_generation(Generation(ids, [-5.0 + 0.2 * i for i in range(6)], "length"))
    sample = conv.to_sample()
    sample.advantage = advantage
    return sample


def plain_loss(policy: Policy, sample: Sample, weight: float) -> torch.Tensor:
    """The reference: whole-sequence logits through the LM head, one log-softmax, no chunks."""
    with policy.autocast():
        logits = policy.model(**model_inputs(policy, sample)).logits[0]  # type: ignore[operator]
    logits = logits.float()
    logits[:, policy.banned_ids] = float("-inf")
    logp_all = torch.log_softmax(logits[:-1], dim=-1)
    ids = sample.input_ids.to(policy.device)
    positions = sample.loss_mask.nonzero()[:, 0].to(policy.device)
    logp = logp_all.gather(-1, ids[1:, None])[:, 0][positions - 1]
    behaviour = sample.behaviour_logprobs[sample.loss_mask].to(policy.device)
    coefs = LossCoefficients(clip_low=0.2, clip_high=0.28, tis_cap=2.0)
    terms = token_loss(logp, logp.detach(), behaviour, sample.advantage, coefs)
    return terms.loss.sum() * weight


def grads_of(policy: Policy, fn: Any) -> tuple[float, dict[str, torch.Tensor]]:
    policy.model.zero_grad(set_to_none=True)
    policy.model.train()
    loss = float(fn())
    grads = {n: p.grad.detach().float().clone() for n, p in policy.model.named_parameters()
             if p.grad is not None}  # fmt: skip
    return loss, grads


def compare(policy: Policy, rtol: float) -> None:
    samples = [two_turn_sample(policy, 1.0), two_turn_sample(policy, -0.5)]
    weight = 1.0 / sum(int(s.loss_mask.sum()) for s in samples)

    def plain() -> float:
        total = 0.0
        for s in samples:
            loss = plain_loss(policy, s, weight)
            loss.backward()
            total += float(loss.detach())
        return total

    ref_loss, ref = grads_of(policy, plain)
    use_varlen_vision_attention(policy.model)
    set_checkpointing(policy.model, 0.5, 0.5)
    learner = Learner(policy, ALGO)
    fast_loss, fast = grads_of(policy, lambda: sum(learner._sample_terms(s, weight)["loss"]
                                                   for s in samples))  # fmt: skip
    assert fast_loss == pytest.approx(ref_loss, rel=rtol, abs=1e-6)
    assert fast.keys() == ref.keys()
    assert len(ref) > 20
    visual = [n for n in ref if ".visual." in n or n.startswith("model.visual")]
    assert visual, "the vision tower must receive gradients"
    for name, g in ref.items():
        err = float((fast[name] - g).norm() / g.norm().clamp_min(1e-12))
        assert err < rtol, f"{name}: relative gradient error {err:.2e}"


def test_optimised_loss_and_gradients_equal_plain_fp32_cpu(tiny_model_dir: Path) -> None:
    compare(load_policy(str(tiny_model_dir), device="cpu"), rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (varlen flash attention)")
def test_optimised_loss_and_gradients_equal_plain_bf16_cuda(tiny_model_dir: Path) -> None:
    compare(load_policy(str(tiny_model_dir), "bfloat16", device="cuda"), rtol=2e-2)


def test_master_adamw_equals_torch_adamw() -> None:
    torch.manual_seed(0)
    ref = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    live = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    opt_ref = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1)
    opt = MasterAdamW(live, lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in ref]
        for p, q, g in zip(ref, live, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        opt_ref.step()
        opt.step()
    for p, q in zip(ref, live, strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
    state = opt.state_dict()
    again = MasterAdamW([torch.nn.Parameter(torch.zeros_like(p)) for p in ref], lr=1e-2)
    again.load_state_dict(state)
    for p, q in zip(ref, again._live(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
    assert int(again.inner.state[again.master[0]]["step"]) == 3


def test_master_adamw_keeps_fp32_masters_of_bf16_parameters() -> None:
    """A 1e-4 step on a bf16 weight of 1.0 rounds away in bf16 (spacing 2^-7), but not in the
    fp32 master: after 100 such steps the master moved by ~1e-2 and the bf16 weight follows."""
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterAdamW([p], lr=1e-4)
    for _ in range(100):
        p.grad = torch.ones_like(p)
        opt.step()
    assert float(opt.master[0][0]) == pytest.approx(1.0 - 1e-2, rel=1e-4)
    assert p.dtype == torch.bfloat16
    assert float(p[0]) == pytest.approx(0.99, abs=4e-3)


def test_spread_and_flop_examples() -> None:
    assert spread(8, 0.5) == [0, 2, 4, 6]
    assert spread(4, 1.0) == [0, 1, 2, 3]
    assert spread(4, 0) == []
    assert len(spread(36, 0.25)) == 9
    assert image_grid(1280, 720, 14) == (1, 52, 92)  # 1,196 tokens
    assert image_grid(1920, 1080, 14) == (1, 78, 138)  # 2,691 tokens
    assert image_grid(1920, 1080, 16) == (1, 68, 120)  # 2,040 tokens (Qwen3-VL)
    assert vision_attention_flops([64, 64], 1280, 28) == pytest.approx(1.174e9, rel=1e-3)
    s = Shape(int(1e9), 10, 1024, 0, 1000, 0, 0.0)
    assert train_flops(s) == pytest.approx(3 * 2.02048e12)
    assert train_flops(s, text_ckpt=1.0) == pytest.approx(8.08192e12)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_pipelined_offload_step_is_bitwise_the_serial_one(device: str) -> None:
    """The pipelined offloaded step (5 chunks here; from the second step on, the host update in
    slices of 65,536 elements, one parameter of 150,000 in three), run in the step or deferred to
    a worker thread, leaves the bf16 weights, the fp32 masters and both moments bitwise equal to
    the serial step after 4 steps, clipping and a parameter without a gradient included, and
    survives a state_dict round trip."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA (the copy streams); the CPU variant runs the same chunks")
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (128, 16), (16,), (48, 48), (7,), (300, 500)]
    init = [torch.randn(s, device=device).to(torch.bfloat16) for s in shapes]
    runs = []
    for pipeline, defer in ((False, False), (True, False), (True, True)):
        live = [torch.nn.Parameter(t.clone()) for t in init]
        opt = MasterAdamW(live, lr=1e-2, weight_decay=0.1, offload=True, pipeline=pipeline,
                          defer=defer, chunk_bytes=48 * 48 * 4, slice_elements=65536)  # fmt: skip
        gen = torch.Generator(device=device).manual_seed(1)
        for step in range(4):
            for i, p in enumerate(live):
                skip = i == 3 and step % 2 == 0  # a parameter with no gradient in some steps
                p.grad = (
                    None
                    if skip
                    else torch.randn(p.shape, generator=gen, device=device).to(torch.bfloat16)
                )
            torch.nn.utils.clip_grad_norm_(live, 1.0)
            opt.step()
            assert opt.in_flight == defer  # deferred: the update runs after the step returned
            opt.zero_grad(set_to_none=True)  # (a deferred update keeps the gradients it reads)
        opt.settle()
        runs.append((live, opt))
    (serial, ref), (piped, opt), (deferred, dopt) = runs
    assert opt._chunks == [[0, 1], [2, 3], [4], [5], [6]]
    assert opt.last_seconds["total"] > 0
    assert len(dopt.updates) == 4
    assert all(u["update"] > 0 for u in dopt.updates)
    for run, o in ((piped, opt), (deferred, dopt)):
        for a, b in zip(serial, run, strict=True):
            assert torch.equal(a, b)
        for m_ref, m in zip(ref.master, o.master, strict=True):
            assert torch.equal(m_ref, m)
            for key in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(ref.inner.state[m_ref][key], o.inner.state[m][key])
    assert int(opt.inner.state[opt.master[3]]["step"]) == 2  # stepped only when it had a grad
    assert opt._sliceable([0, 1, 2, 3, 4, 5, 6])
    assert _slices([3, 4, 10], 8) == [[(0, 0, 3), (1, 0, 4)], [(2, 0, 8)], [(2, 8, 10)]]
    again = MasterAdamW([torch.nn.Parameter(torch.zeros_like(t)) for t in init], lr=1e-2,
                        offload=True)  # fmt: skip
    again.load_state_dict(opt.state_dict())
    for a, b in zip(piped, again._live(), strict=True):
        assert torch.equal(a, b)


def test_learner_steps_with_the_pipelined_optimizer_are_bitwise_the_serial_ones() -> None:
    """Three Learner steps of the tiny Qwen2.5-VL (two synthetic 2-screenshot trajectories,
    clipping on) with the offloaded AdamW: the same losses and bitwise the same weights with
    the pipelined step, inline or deferred (the trainer's), as with the serial one."""
    torch.manual_seed(0)
    base = build_model("tiny_qwen2_5_vl", "cpu")
    samples = [synthetic_sample(base, 2, 112, 112, i) for i in range(2)]
    runs = []
    for pipeline, defer in ((False, False), (True, False), (True, True)):
        model = copy.deepcopy(base)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = MasterAdamW(params, lr=1e-3, offload=True, pipeline=pipeline, defer=defer)
        learner = Learner(bench_policy(model), ALGO, optimizer=opt)
        losses = [learner.step(samples)["loss"] for _ in range(3)]
        assert learner.policy.lock.pending == defer  # the next holder of the lock waits for it
        with learner.policy.lock:
            runs.append((losses, [p.detach().clone() for p in model.parameters()]))
    (serial_losses, serial), *others = runs
    assert serial_losses[2] != serial_losses[0]  # the weights moved
    for losses, weights in others:
        assert losses == serial_losses
        for a, b in zip(serial, weights, strict=True):
            assert torch.equal(a, b)
