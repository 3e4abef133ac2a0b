"""Supervised fine-tuning on demonstrations: the warm-up's optimisation, apart from the run.

Each epoch shuffles the demonstrations (seeded), cuts them into batches of warmup.batchSize
demonstrations and takes one AdamW step per batch at warmup.learningRate on the mean negative
log-likelihood of the replies' tokens (Learner.supervised_step: the learner's own forward, so
the FSDP2 learner works too), gradients clipped at algorithm.maxGradNorm. The warm-up has its own
optimizer: GRPO's AdamW moments start fresh after it. Samples are built batch by batch (each one
holds its screenshots' pixel values, too many to keep for a large set). What it leaves out: a
learning-rate schedule, and packing several demonstrations into one sequence.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kubecua_trainer.config import WarmupConfig
from kubecua_trainer.learner import Learner
from kubecua_trainer.logprobs import token_logprobs
from kubecua_trainer.model import Policy
from kubecua_trainer.speedups.optimizer import MasterAdamW
from kubecua_trainer.tokens import Sample
from kubecua_trainer.trajectories import Trajectory


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


def fit_demonstrations(
    learner: Learner,
    demos: list[Trajectory],
    build: Callable[[Trajectory], list[Sample]],
    cfg: WarmupConfig,
    seed: int,
    on_epoch: Callable[[int, float], None] = lambda epoch, loss: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Fit:
    """cfg.epochs passes over demos; should_stop() is asked before every step (a stop leaves
    the fit unfinished: Fit.stopped). Blocking: run it in a thread."""
    optimizer = warmup_optimizer(learner, cfg.learning_rate)
    rng = random.Random(seed)
    fit = Fit()
    for epoch in range(1, cfg.epochs + 1):
        order = list(range(len(demos)))
        rng.shuffle(order)
        nll, tokens = 0.0, 0.0
        for start in range(0, len(order), cfg.batch_size):
            if should_stop():
                fit.stopped = True
                return fit
            batch = [s for i in order[start : start + cfg.batch_size] for s in build(demos[i])]
            out = learner.supervised_step(batch, optimizer)
            nll += out["loss"] * out["tokens"]
            tokens += out["tokens"]
            fit.steps += 1
        fit.epoch_losses.append(nll / max(tokens, 1.0))
        fit.tokens_per_epoch = int(tokens)
        on_epoch(epoch, fit.epoch_losses[-1])
    if isinstance(optimizer, MasterAdamW) and isinstance(learner.optimizer, MasterAdamW):
        learner.optimizer.adopt_masters(optimizer)  # GRPO goes on from the warmed weights
    return fit


@torch.no_grad()
def reply_logprob(policy: Policy, sample: Sample) -> float:
    """log P(every mask-1 token of the sample) under the policy at temperature 1: the log
    probability of the demonstrated replies (a sum over tokens, so exp() of it is P(reply))."""
    with policy.autocast():
        logp, _ = token_logprobs(policy, sample, 1.0)
    return float(logp.sum())
