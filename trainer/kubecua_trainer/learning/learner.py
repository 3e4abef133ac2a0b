"""The learner: one AdamW step of the GRPO loss over a batch of token-exact samples.

Samples are run one at a time (batch of one, no padding; gradients accumulate), which keeps the
peak memory at one sequence. Distributed (sharded.py, FSDP2): every rank gets the whole batch,
trains its token-balanced share with the batch-wide aggregation weights, and FSDP sums the
gradients, so the update equals the single-process one up to summation order. The optimizer
state converts between the two layouts (by index, by name), so a run resumes at another world
size. Ranks must run the
same number of forward/backward passes (each one all-gathers), so a short share is padded with
zero-weight passes. algorithm.miniBatches > 1 splits a step's samples, in order, into that many
mini-batches, one optimizer step each (verl's ppo_mini_batch_size): the proximal log-probs of the
later mini-batches are computed before the first update, so their PPO ratio and clip measure how
far the earlier updates moved the policy. With one (the default) the ratio is 1 at the step
(loss.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.learning.loss import AGGREGATIONS, POLICY_LOSSES, LossCoefficients, LossTerms
from kubecua_trainer.model import Policy
from kubecua_trainer.parallel.distributed import Dist, balance_by_tokens
from kubecua_trainer.parallel.gpu_share import GpuShare
from kubecua_trainer.speedups.optimizer import MasterAdamW
from kubecua_trainer.speedups.prefetch import PixelPrefetch
from kubecua_trainer.tokens import Sample, check_image_pads


class Learner:
    """Holds the optimizer; step() is one optimizer step over the given samples."""

    def __init__(
        self,
        policy: Policy,
        algo: AlgorithmConfig,
        reference: Policy | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        net: torch.nn.Module | None = None,
        dist: Dist | None = None,
    ):
        """optimizer: AdamW over the trainable parameters unless given (e.g. perf.MasterAdamW,
        fp32 master weights + moments on the GPU or in host memory, for bf16 parameters).
        net, dist: the FSDP2 root (sharded.LogprobNet) and the ranks, in a distributed run."""
        if algo.kl_coef > 0 and reference is None:
            raise ValueError("algorithm.klCoef > 0 needs a reference policy")
        self.policy = policy
        self.algo = algo
        self.reference = reference
        self.net = net
        self.dist = dist or Dist()
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = optimizer or torch.optim.AdamW(
            params, lr=algo.learning_rate, weight_decay=0.0
        )
        self.steps = 0
        # the next sample's pixels copied to the GPU during this one's kernels (CUDA; off unless
        # speedups.prefetch.PREFETCH_PIXELS or prefetch.enabled)
        self.prefetch = PixelPrefetch(policy.device)
        # The GPU shared with an engine generating meanwhile (gpu_share.py; train.py sets it):
        # the step runs on its learning stream, each sample's pass after the engine's admissions.
        self.share: GpuShare | None = None
        self._policy_loss = POLICY_LOSSES[algo.policy_loss]
        clip = algo.gspo_clip if algo.policy_loss == "gspo" else algo.clip
        self._coefs = LossCoefficients(
            clip.low, clip.high, algo.tis_cap, algo.kl_coef, algo.entropy_coef
        )

    def _reference_logprobs(self, sample: Sample) -> torch.Tensor | None:
        if self.reference is None or self.algo.kl_coef <= 0:
            return None
        with torch.no_grad(), self.reference.autocast():
            lp, _ = token_logprobs(self.reference, sample, sample.temperature)
        return lp.to(self.policy.device)

    def _logprobs(
        self, sample: Sample, temperature: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs, entropy) of the sample's trained tokens, at its own temperature unless
        given: through the FSDP2 root in a distributed run, else the policy under autocast."""
        t = sample.temperature if temperature is None else temperature
        if self.net is not None:
            return self.net(sample, t)
        with self.policy.autocast():
            return token_logprobs(self.policy, sample, t)

    def _proximal(self, work: list[tuple[Sample, float, bool]]) -> list[torch.Tensor | None]:
        """The log-probs of a later mini-batch's samples under the weights before the step's
        first update (no grad): its PPO ratio's denominator."""
        share = self.share
        out: list[torch.Tensor | None] = []
        with torch.no_grad():
            for sample, _, _ in work:
                with share.chunk() if share is not None else contextlib.nullcontext():
                    out.append(self._logprobs(sample)[0])
        return out

    def _sample_terms(
        self,
        sample: Sample,
        weight: float,
        upcoming: Sample | None = None,
        proximal: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Forward + backward of one sample, its loss scaled by its aggregation weight.

        Log-probs are recomputed at the temperature the sample was played at (a scheduled
        step's), the behaviour log-probs' own. The entropy bonus is per token, so the
        aggregation weights make it the batch's mean token entropy (per sequence with
        aggregation "sequence")."""
        sample = self.prefetch.take(sample)
        logp, entropy = self._logprobs(sample)
        behaviour = sample.behaviour_logprobs[sample.loss_mask].to(logp.device)
        terms: LossTerms = self._policy_loss(
            logp,
            logp.detach() if proximal is None else proximal,
            behaviour,
            sample.advantage,
            self._coefs,
            self._reference_logprobs(sample),
            entropy,
        )
        loss = terms.loss.sum() * weight
        # FSDP averages gradients over the ranks; each rank holds a part of one sum.
        (loss * self.dist.world if self.net is not None else loss).backward()
        self.prefetch.start(upcoming)  # before the reads below wait for this sample's kernels
        return {
            "loss": float(loss.detach()),
            "kl": float(terms.kl.sum()),
            "entropy": float(entropy.detach().sum()),
            "clipped": float(terms.clipped.sum()),
            "mismatch": float((logp.detach() - behaviour).abs().sum()),
        }

    def step(self, samples: list[Sample], version: int | None = None) -> dict[str, float]:
        """One optimizer step over the batch; returns loss, kl, entropy, grad_norm,
        clip_fraction, tokens, seconds (and logprob_mismatch: mean |trainer - engine| log-prob).
        version: the training step these weights then include (Policy.version), set under
        policy.lock with the update, so no generation sees new weights under the old label."""
        start = time.perf_counter()
        samples = trainable(samples)
        for s in samples:
            check_image_pads(s, self.policy.merge_size, self.policy.image_pad_id)
            if s.temperature <= 0:  # log-probs at T = 0 do not exist (division by zero)
                raise ValueError(f"sample of {s.group_id!r} was played greedily: not trainable")
        lengths = [int(s.loss_mask.sum()) for s in samples]
        totals = dict.fromkeys(("loss", "kl", "entropy", "clipped", "mismatch"), 0.0)
        norms: list[float] = []
        works = []  # per mini-batch, this process's passes, each aggregated on its own
        for batch in mini_batches(list(range(len(samples))), self.algo.mini_batches):
            mine, sizes = [samples[i] for i in batch], [lengths[i] for i in batch]
            works.append(self._my_share(mine, sizes, AGGREGATIONS[self.algo.aggregation](sizes)))
        waiting = time.perf_counter()
        share = self.share
        streams = share.learning() if share is not None else contextlib.nullcontext()
        # the lock first: the learning stream is drained before the lock goes (gpu_share.py)
        with self.policy.lock, streams:  # (a generation round, or the last deferred update)
            lock_wait = time.perf_counter() - waiting
            self.policy.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            try:
                # before the first update: the later mini-batches' proximal log-probs
                first: list[torch.Tensor | None] = [None] * len(works[0])  # logp.detach()
                proximal = [first] + [self._proximal(w) for w in works[1:]]
                for b, work in enumerate(works):
                    if b > 0:  # a deferred host update must land before this forward reads
                        self._settle()
                    for i, (sample, weight, real) in enumerate(work):
                        if self.net is not None:  # reduce-scatter the gradients once, at the end
                            self.net.set_requires_gradient_sync(i == len(work) - 1)  # type: ignore[operator]
                        upcoming = work[i + 1][0] if i + 1 < len(work) else None
                        # shared: after the engine's work, apart from its graph captures
                        with share.chunk() if share is not None else contextlib.nullcontext():
                            terms = self._sample_terms(sample, weight, upcoming, proximal[b][i])
                        for k, v in terms.items():
                            totals[k] += v if real else 0.0
                    if work:
                        fence = (
                            share.capture_fence() if share is not None else contextlib.nullcontext()
                        )
                        with fence:  # the offloaded AdamW synchronizes the whole device
                            norms.append(float(self._clip_and_step()))
                if version is not None:
                    self.policy.version = version
            finally:
                self.policy.model.eval()
        if self.dist.enabled:
            totals = dict(zip(totals, self.dist.sum(list(totals.values())), strict=True))
        self.steps += 1
        tokens = max(sum(lengths), 1)
        shared = share.step_stats() if share is not None else {}
        return shared | {
            # each mini-batch's loss is its own aggregate: their mean (the loss with one)
            "loss": totals["loss"] / max(len(works), 1),
            "kl": totals["kl"] / tokens,
            "entropy": totals["entropy"] / tokens,
            "grad_norm": sum(norms) / len(norms) if norms else 0.0,
            "clip_fraction": totals["clipped"] / tokens,
            "logprob_mismatch": totals["mismatch"] / tokens,
            "tokens": float(sum(lengths)),
            "sequence_tokens": float(sum(int(s.input_ids.numel()) for s in samples)),
            # screenshots in the step's samples: what a benchmark of the same shape needs
            "images": float(
                sum(0 if s.image_grid_thw is None else len(s.image_grid_thw) for s in samples)
            ),
            # MasterAdamW's pipelined offload: the optimizer's own seconds in the step (with
            # defer, queueing the gradients' copies only: the update runs after the step)
            "optimizer_seconds": float(
                getattr(self.optimizer, "last_seconds", {}).get("total", 0.0)
            ),
            "lock_wait_seconds": lock_wait,
            "samples": float(len(samples)),
            "seconds": time.perf_counter() - start,
        }

    def supervised_step(
        self, samples: list[Sample], optimizer: torch.optim.Optimizer
    ) -> dict[str, float]:
        """One step of the supervised warm-up (warmup/sft.py) with its own optimizer: the mean
        negative log-likelihood of the batch's mask-1 tokens (the replies), at temperature 1.

        Example: two samples with reply log-probs [-1, -3] and [-2] give loss (1 + 3 + 2) / 3 = 2.
        Distributed, each rank runs its share (the same passes as step()) and FSDP sums."""
        start = time.perf_counter()
        samples = trainable(samples)
        lengths = [int(s.loss_mask.sum()) for s in samples]
        tokens = max(sum(lengths), 1)
        work = self._my_share(samples, lengths, [1.0 / tokens] * len(samples))
        nll, grad_norm = 0.0, 0.0
        with self.policy.lock:
            self.policy.model.train()
            optimizer.zero_grad(set_to_none=True)
            try:
                for i, (sample, weight, real) in enumerate(work):
                    if self.net is not None:
                        self.net.set_requires_gradient_sync(i == len(work) - 1)  # type: ignore[operator]
                    logp, _ = self._logprobs(sample, 1.0)
                    loss = -logp.sum() * weight
                    (loss * self.dist.world if self.net is not None else loss).backward()
                    nll += float(loss.detach()) if real else 0.0
                if samples:
                    grad_norm = float(self._clip_and_step(optimizer))
            finally:
                self.policy.model.eval()
        if self.dist.enabled:
            (nll,) = self.dist.sum([nll])
        return {
            "loss": nll,
            "grad_norm": grad_norm,
            "tokens": float(sum(lengths)),
            "samples": float(len(samples)),
            "seconds": time.perf_counter() - start,
        }

    def _my_share(
        self, samples: list[Sample], lengths: list[int], weights: list[float]
    ) -> list[tuple[Sample, float, bool]]:
        """(sample, weight, counts) to run here: all of them in one process; in a distributed run
        this rank's token-balanced share, padded to the longest share with weight-0 passes."""
        if not self.dist.enabled:
            return list(zip(samples, weights, [True] * len(samples), strict=True))
        mine = passes(samples, self.dist.world)[self.dist.rank]
        return [(samples[i], weights[i] if real else 0.0, real) for i, real in mine]

    def _settle(self) -> None:
        if isinstance(self.optimizer, MasterAdamW):
            self.optimizer.settle()

    def _clip_and_step(self, optimizer: torch.optim.Optimizer | None = None) -> torch.Tensor:
        optimizer = optimizer or self.optimizer  # the warm-up brings its own
        params = [p for g in optimizer.param_groups for p in g["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, self.algo.max_grad_norm)
        if hasattr(norm, "full_tensor"):  # a DTensor: the norm over all shards
            norm = norm.full_tensor()
        optimizer.step()
        if isinstance(optimizer, MasterAdamW) and optimizer.in_flight:
            # defer=True: the update still runs; the next holder of the lock waits for it
            self.policy.lock.defer(optimizer.settle)
        optimizer.zero_grad(set_to_none=True)
        return norm

    def state_dict(self) -> dict[str, Any]:
        """Single process: the optimizer's own state dict (keyed by parameter index).
        Distributed (collective): the full state keyed by parameter name on rank 0.
        Either loads into the other (load_state_dict converts), so a run can change its
        world size between 1 and more processes."""
        if self.net is not None:
            from kubecua_trainer.learning.sharded import optimizer_full_state

            state = optimizer_full_state(self.net, self.optimizer)
            return {"optimizer_by_name": state, "steps": self.steps}
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Distributed: rank 0 passes what state_dict() wrote, the other ranks {"steps": n}."""
        if self.net is not None:
            from kubecua_trainer.learning.sharded import load_optimizer_full_state

            if self.dist.is_main and "optimizer_by_name" not in d:
                d = {**d, "optimizer_by_name": by_name(d["optimizer"], self.param_names())}
            state = d.get("optimizer_by_name", {})
            load_optimizer_full_state(self.net, self.optimizer, state, self.dist.group)
        elif "optimizer" in d:
            self.optimizer.load_state_dict(d["optimizer"])
        elif not isinstance(self.optimizer, torch.optim.AdamW):
            raise _format_error(
                "this checkpoint comes from a distributed run, and trainer.optimizerOffload in "
                "one process keeps fp32 master weights the checkpoint does not have; resume it "
                "without optimizerOffload, or with nodes x gpusPerNode > 1"
            )
        else:
            self.optimizer.load_state_dict(by_index(d["optimizer_by_name"], self.param_names()))
        # The spec's learning rate, not the checkpoint's: a torch optimizer's state dict carries
        # its param_groups' lr, so a run resumed with another algorithm.learningRate kept the one
        # it was saved with (bench-learning's learning-rate-0 control, resumed from its GRPO
        # arm's step-0 checkpoint, trained at the GRPO arm's 3e-4 and rose 30 points).
        for group in self.optimizer.param_groups:
            group["lr"] = self.algo.learning_rate
        self.steps = int(d["steps"])

    def param_names(self) -> list[str]:
        """The trainable parameters' names as the distributed state keys them (the FSDP2 root,
        sharded.LogprobNet, holds the model as `model`), in the optimizer's order."""
        model = self.policy.model
        return [f"model.{n}" for n, p in model.named_parameters() if p.requires_grad]


def mini_batches(items: list[int], count: int) -> list[list[int]]:
    """items split in order into min(count, len) runs whose sizes differ by at most one, the
    longer first. Example: 5 items into 2 -> [[0, 1, 2], [3, 4]]; none -> [[]] (one empty
    batch: a step of nothing still counts as one)."""
    count = max(1, min(count, len(items)))
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for b in range(count):
        end = start + size + (1 if b < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def trainable(samples: list[Sample]) -> list[Sample]:
    """The samples a step trains: those with at least one generated token."""
    return [s for s in samples if bool(s.loss_mask.any())]


def passes(samples: list[Sample], world: int) -> list[list[tuple[int, bool]]]:
    """Per rank, the forward/backward passes of a distributed step as (index, counts): its
    token-balanced share, then the shortest sample as weight-0 passes up to the longest share
    (every rank runs as many passes: each one all-gathers)."""
    if not samples:
        return [[] for _ in range(world)]
    sizes = [int(s.input_ids.numel()) for s in samples]
    shares = balance_by_tokens(sizes, world)
    shortest = min(range(len(samples)), key=lambda i: sizes[i])
    longest = max(len(s) for s in shares)
    return [[(i, True) for i in s] + [(shortest, False)] * (longest - len(s)) for s in shares]


def by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A torch optimizer state dict keyed by parameter index -> keyed by name (the layout of
    torch.distributed.checkpoint's full optimizer state dict); the tensors are the same."""
    if "param_groups" not in state:  # perf.MasterAdamW's: fp32 masters beside the weights
        raise _format_error(
            "this checkpoint comes from one process with trainer.optimizerOffload, whose fp32 "
            "master weights a distributed run cannot take over exactly; resume it in one process"
        )
    groups = state["param_groups"]
    if sum(len(g["params"]) for g in groups) != len(names):
        raise _trainable_mismatch(sum(len(g["params"]) for g in groups), len(names))
    return {
        "state": {names[i]: v for i, v in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in groups],
    }


def by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of by_name, for a single process's optimizer over `names`."""
    index = {n: i for i, n in enumerate(names)}
    groups = state["param_groups"]
    saved = [n for g in groups for n in g["params"]]
    if sorted(saved) != sorted(names):
        raise _trainable_mismatch(len(saved), len(names))
    return {
        "state": {index[n]: v for n, v in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in groups],
    }


def _trainable_mismatch(saved: int, now: int) -> Exception:
    return _format_error(
        f"the checkpoint's optimizer state covers {saved} parameters but this run trains {now}; "
        "model.freezeVision must stay as it was when the checkpoint was written"
    )


def _format_error(message: str) -> Exception:
    from kubecua_trainer.config import ConfigError  # the CLI reports it and exits 2

    return ConfigError(message)
