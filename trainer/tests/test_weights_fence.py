"""The deferred optimizer update and the policy lock's fence (weights_lock.py): whoever takes the
lock after a step waits for that step's host update and then sees its weights; a failed update
fails every later holder; the warm-up's fp32 masters carry over to GRPO's optimizer."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_train import local_run
from transformers import AutoModelForImageTextToText

from bench.shapes import bench_policy, build_model, synthetic_sample
from kubecua_api.trainingrun import WarmupConfig
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.speedups.optimizer import MasterAdamW
from kubecua_trainer.warmup.sft import fit_demonstrations
from kubecua_trainer.weights_lock import WeightsLock

ALGO = AlgorithmConfig(learning_rate=1e-3)  # clip 0.2/0.28, TIS cap 2, PPO, no KL
WAIT = 30.0  # seconds: a bound on waits for events that come at once when the code is right


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).bfloat16()) for s in ((40, 8), (8,))]


def _grads(live: list[torch.nn.Parameter]) -> None:
    gen = torch.Generator().manual_seed(7)
    for p in live:
        p.grad = torch.randn(p.shape, generator=gen).bfloat16()


def _held_update(opt: MasterAdamW) -> threading.Event:
    """Make the deferred update wait for the returned event before it runs."""
    release, finish = threading.Event(), opt._finish

    def held(launched):  # type: ignore[no-untyped-def]
        assert release.wait(WAIT)
        return finish(launched)

    opt._finish = held  # type: ignore[method-assign]
    return release


def test_the_next_holder_of_the_lock_waits_for_the_update_and_sees_its_weights() -> None:
    inline = _params()
    ref = MasterAdamW(inline, lr=1e-2, offload=True)
    _grads(inline)
    ref.step()

    live = _params()
    opt = MasterAdamW(live, lr=1e-2, offload=True, defer=True)
    lock, release = WeightsLock(), _held_update(opt)
    _grads(live)
    with lock:
        opt.step()
        lock.defer(opt.settle)
        opt.zero_grad(set_to_none=True)
    assert opt.in_flight
    assert lock.pending
    waiting, seen = threading.Event(), []
    settle = lock._pending
    assert settle is not None

    def settling() -> None:
        waiting.set()  # the reader is inside the lock's fence, about to wait for the update
        settle()

    lock._pending = settling

    def reader() -> None:
        with lock:
            seen.append([p.detach().clone() for p in live])

    thread = threading.Thread(target=reader)
    thread.start()
    assert waiting.wait(WAIT)
    assert seen == []  # the update is held back, so the reader cannot be past the fence
    release.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert not lock.pending
    assert not opt.in_flight
    for a, b in zip(seen[0], inline, strict=True):
        assert torch.equal(a, b)  # the new weights, bitwise the inline step's
    assert lock.waits == 1
    assert lock.waited_seconds > 0
    with lock:  # settled once: later holders pass straight through
        pass
    assert lock.waits == 1


def test_a_failed_update_fails_every_later_holder_and_leaves_the_lock_free() -> None:
    live = _params()
    opt = MasterAdamW(live, lr=1e-2, offload=True, defer=True)

    def broken(launched):  # type: ignore[no-untyped-def]
        raise RuntimeError("host update failed")

    opt._finish = broken  # type: ignore[method-assign]
    lock = WeightsLock()
    _grads(live)
    with lock:
        opt.step()
        lock.defer(opt.settle)
    for _ in range(2):  # the weights are half-written: nobody may use them, now or later
        with pytest.raises(RuntimeError, match="host update failed"), lock:
            pass
    with pytest.raises(RuntimeError, match="host update failed"):
        opt.state_dict()  # nor checkpoint them
    other = threading.Thread(target=lambda: got.append(lock._lock.acquire(blocking=False)))
    got: list[bool] = []
    other.start()
    other.join(WAIT)
    assert got == [True]  # the failing acquisitions released the underlying lock


def test_grpo_goes_on_from_the_warm_up_weights_with_offloaded_masters() -> None:
    """GRPO's MasterAdamW holds fp32 masters from before the warm-up; without adopting the
    warm-up optimizer's, its first step wrote the pre-warm-up weights back. With GRPO at
    learning rate 0, its step must leave the warmed weights bitwise as they were."""
    torch.manual_seed(0)
    model = build_model("tiny_qwen2_5_vl", "cpu").to(torch.bfloat16)
    samples = [synthetic_sample(model, 2, 112, 112, i) for i in range(2)]
    before = [p.detach().clone() for p in model.parameters()]
    params = [p for p in model.parameters() if p.requires_grad]
    grpo = MasterAdamW(params, lr=0.0, offload=True, defer=True)
    learner = Learner(bench_policy(model), ALGO, optimizer=grpo)  # lr: the optimizer's
    cfg = WarmupConfig.model_validate({"demonstrations": "demos", "epochs": 2, "batchSize": 2,
                                       "learningRate": 1e-2})  # fmt: skip
    fit = fit_demonstrations(learner, [0, 1], lambda i: [samples[i]], cfg, seed=0)
    assert fit.steps == 2
    with learner.policy.lock:
        warmed = [p.detach().clone() for p in model.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, warmed, strict=True))
    learner.step(samples)
    with learner.policy.lock:
        for a, b in zip(warmed, model.parameters(), strict=True):
            assert torch.equal(a, b)


@pytest.mark.asyncio
async def test_a_checkpoint_of_a_deferred_run_holds_the_weights_of_its_own_step(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer's loop with trainer.optimizerOffload and synchronous rollouts defers every
    host update; the checkpoint written right after step 2 waits for that step's update: its
    weights are bitwise the fp32 masters saved beside them (written before the update ended,
    they would be step 1's)."""
    built: list[Any] = []
    finish = MasterAdamW._finish

    def slow_host(self: MasterAdamW, launched: Any) -> dict[str, float]:
        time.sleep(0.5)  # a slow host: without the fence the checkpoint would come first
        return finish(self, launched)

    monkeypatch.setattr(MasterAdamW, "_finish", slow_host)
    with LoopbackSandbox() as sandbox:
        run = local_run(tmp_path, tiny_model_dir, [sandbox.url], steps=2, port=0)
        run.spec.trainer.optimizer_offload = True
        opts = RunOptions(
            console=False,
            source=StaticSource([sandbox.url], TOKEN),
            on_built=lambda engine, learner: built.append(learner),
        )
        result = await train(run, opts)
    learner = built[0]
    assert learner.optimizer.defer
    assert len(learner.optimizer.updates) == 2  # both steps' updates ran, after their steps
    ckpt = Path(str(result.last_checkpoint))
    assert ckpt.name == "step-00000002"
    saved = AutoModelForImageTextToText.from_pretrained(ckpt, local_files_only=True)
    masters = torch.load(ckpt / "optimizer.pt", weights_only=True)["optimizer"]["master"]
    trainable = [p for p in saved.parameters() if p.requires_grad]
    assert len(trainable) == len(masters)
    for weight, master in zip(trainable, masters, strict=True):
        assert torch.equal(weight.detach(), master)
    initial = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, local_files_only=True)
    assert any(not torch.equal(a, b) for a, b in zip(initial.parameters(), trainable, strict=True))
