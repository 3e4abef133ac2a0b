"""Supervised fine-tuning on demonstrations: the warm-up's optimisation, apart from the run.

Each epoch shuffles the demonstrations (seeded), cuts them into batches of warmup.batchSize
demonstrations and takes one AdamW step per batch at warmup.learningRate on the mean negative
log-likelihood of the replies' tokens (Learner.supervised_step: the learner's own forward, so
the FSDP2 learner works too), gradients clipped at algorithm.maxGradNorm. The warm-up has its own
optimizer: GRPO's AdamW moments start fresh after it. A demonstration's samples are built when
its batch first needs them and kept for the next epochs up to SAMPLE_CACHE_BYTES (each holds its
screenshots' pixel values: a large set at a large maxPixels builds again rather than hold them
all). Building them (the processor's patches, the tokenizer) was a fifth of an epoch on the 65
colourkeys demonstrations (2.7 of 13 s, one thread, 2026-11-28); the samples are a function of
the demonstration, so kept ones train exactly as rebuilt ones. The learning rate follows
warmup.schedule (warmup/schedule.py) over the planned steps. What it leaves out: packing several
demonstrations into one sequence.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kubecua_trainer.config import WarmupConfig
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import Policy
from kubecua_trainer.speedups.optimizer import MasterAdamW
from kubecua_trainer.tokens import Sample
from kubecua_trainer.trajectories import Trajectory
from kubecua_trainer.warmup.schedule import rate_factor, set_rate

SAMPLE_CACHE_BYTES = 512 << 20


@dataclass
class Fit:
    """What a warm-up did: mean NLL per reply token of each epoch (as the batches were met,
    before their own update), optimizer steps, and the tokens trained per epoch."""

    epoch_losses: list[float] = field(default_factory=list)
    steps: int = 0
    tokens_per_epoch: int = 0
    stopped: bool = False


def warmup_optimizer(learner: Learner, learning_rate: float) -> torch.optim.Optimizer:
    """AdamW over the learner's trainable parameters (fp32 masters when the learner keeps them
    for bf16 weights, as trainer.optimizerOffload does)."""
    params = [p for g in learner.optimizer.param_groups for p in g["params"]]
    if isinstance(learner.optimizer, MasterAdamW):
        opt = learner.optimizer
        return MasterAdamW(params, lr=learning_rate, offload=opt.offload, defer=opt.defer)
    return torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)


class DemoFit:
    """The warm-up's fit, run a few epochs at a time (spec.warmup.stopWhen measures between
    them): the optimizer, the shuffle and the Fit carry over from one call to the next, so
    epochs run in chunks equal epochs run at once."""

    def __init__(
        self,
        learner: Learner,
        demos: list[Trajectory],
        build: Callable[[Trajectory], list[Sample]],
        cfg: WarmupConfig,
        seed: int,
    ) -> None:
        self.learner, self.demos, self.build, self.cfg = learner, demos, build, cfg
        self.optimizer = warmup_optimizer(learner, cfg.learning_rate)
        self.rng = random.Random(seed)
        self.fit = Fit()
        self._kept: dict[int, list[Sample]] = {}
        self._kept_bytes = 0

    def samples(self, i: int) -> list[Sample]:
        """Demonstration i's samples, kept while they fit SAMPLE_CACHE_BYTES."""
        if i in self._kept:
            return self._kept[i]
        built = self.build(self.demos[i])
        size = sum(sample_bytes(s) for s in built)
        if self._kept_bytes + size <= SAMPLE_CACHE_BYTES:
            self._kept[i] = built
            self._kept_bytes += size
        return built

    def rate_factor(self, step: int) -> float:
        """warmup.schedule's factor at optimizer step `step` of the planned epochs' steps."""
        per_epoch = -(-len(self.demos) // self.cfg.batch_size)
        cfg = self.cfg
        return rate_factor(
            step, cfg.epochs * per_epoch, cfg.schedule, cfg.ramp_fraction, cfg.floor_fraction
        )

    @property
    def epochs(self) -> int:
        return len(self.fit.epoch_losses)

    def state_dict(self) -> dict[str, Any]:
        """What continuing this fit later needs (one process): the optimizer, the shuffle's
        state and the Fit so far; load_state_dict() on a DemoFit of the same demonstrations and
        weights then runs the next epochs as this one would have."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.getstate(),
            "fit": dataclasses.asdict(self.fit),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.setstate(state["rng"])
        self.fit = Fit(**state["fit"])

    def run(
        self,
        epochs: int,
        on_epoch: Callable[[int, float], None] = lambda epoch, loss: None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Fit:
        """`epochs` more passes over the demonstrations; should_stop() is asked before every
        step (a stop leaves the fit unfinished: Fit.stopped). Blocking: run it in a thread."""
        fit = self.fit
        for _ in range(epochs):
            order = list(range(len(self.demos)))
            self.rng.shuffle(order)
            nll, tokens = 0.0, 0.0
            for start in range(0, len(order), self.cfg.batch_size):
                if should_stop():
                    fit.stopped = True
                    return fit
                chunk = order[start : start + self.cfg.batch_size]
                batch = [s for i in chunk for s in self.samples(i)]
                set_rate(self.optimizer, self.cfg.learning_rate, self.rate_factor(fit.steps))
                out = self.learner.supervised_step(batch, self.optimizer)
                nll += out["loss"] * out["tokens"]
                tokens += out["tokens"]
                fit.steps += 1
            fit.epoch_losses.append(nll / max(tokens, 1.0))
            fit.tokens_per_epoch = int(tokens)
            on_epoch(self.epochs, fit.epoch_losses[-1])
        return fit

    def finish(self) -> None:
        """GRPO goes on from the warmed weights (its fp32 masters too)."""
        opt, own = self.optimizer, self.learner.optimizer
        if isinstance(opt, MasterAdamW) and isinstance(own, MasterAdamW):
            own.adopt_masters(opt)


def sample_bytes(sample: Sample) -> int:
    tensors = (sample.input_ids, sample.loss_mask, sample.behaviour_logprobs, sample.pixel_values)
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def fit_demonstrations(
    learner: Learner,
    demos: list[Trajectory],
    build: Callable[[Trajectory], list[Sample]],
    cfg: WarmupConfig,
    seed: int,
    on_epoch: Callable[[int, float], None] = lambda epoch, loss: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Fit:
    """cfg.epochs passes over demos at once (DemoFit in one call). Blocking: run it in a
    thread."""
    fitter = DemoFit(learner, demos, build, cfg, seed)
    fit = fitter.run(cfg.epochs, on_epoch, should_stop)
    if not fit.stopped:
        fitter.finish()
    return fit


@torch.no_grad()
def reply_logprob(policy: Policy, sample: Sample) -> float:
    """log P(every mask-1 token of the sample) under the policy at temperature 1: the log
    probability of the demonstrated replies (a sum over tokens, so exp() of it is P(reply))."""
    with policy.autocast():
        logp, _ = token_logprobs(policy, sample, 1.0)
    return float(logp.sum())
