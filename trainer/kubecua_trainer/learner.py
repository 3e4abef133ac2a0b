"""The learner: one AdamW step of the GRPO loss over a batch of token-exact samples.

Samples are run one at a time (batch of one, no padding; gradients accumulate), which keeps the
peak memory at one sequence. What it leaves out: several optimizer steps per batch (so the PPO
ratio is 1 at the step; see loss.py) and data parallelism (FSDP2) across GPUs.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from kubecua_trainer.logprobs import token_logprobs
from kubecua_trainer.loss import AGGREGATIONS, token_loss
from kubecua_trainer.model import Policy
from kubecua_trainer.tokens import Sample, check_image_pads


class Learner:
    """Holds the optimizer; step() is one optimizer step over the given samples."""

    def __init__(
        self,
        policy: Policy,
        algo: Any,
        reference: Policy | None = None,
        optimizer: torch.optim.Optimizer | None = None,
    ):
        """optimizer: AdamW over the trainable parameters unless given (e.g. perf.MasterAdamW,
        fp32 master weights + moments on the GPU or in host memory, for bf16 parameters)."""
        if algo.kl_coef > 0 and reference is None:
            raise ValueError("algorithm.klCoef > 0 needs a reference policy")
        self.policy = policy
        self.algo = algo
        self.reference = reference
        params = [p for p in policy.model.parameters() if p.requires_grad]
        self.optimizer = optimizer or torch.optim.AdamW(
            params, lr=algo.learning_rate, weight_decay=0.0
        )
        self.steps = 0

    def _reference_logprobs(self, sample: Sample) -> torch.Tensor | None:
        if self.reference is None or self.algo.kl_coef <= 0:
            return None
        with torch.no_grad(), self.reference.autocast():
            lp, _ = token_logprobs(self.reference, sample, self.algo.temperature)
        return lp.to(self.policy.device)

    def _sample_terms(self, sample: Sample, weight: float) -> dict[str, float]:
        """Forward + backward of one sample, its loss scaled by its aggregation weight."""
        with self.policy.autocast():
            logp, entropy = token_logprobs(self.policy, sample, self.algo.temperature)
        mask = sample.loss_mask
        behaviour = sample.behaviour_logprobs[mask].to(logp.device)
        terms = token_loss(
            logp,
            logp.detach(),
            behaviour,
            sample.advantage,
            self.algo.clip.low,
            self.algo.clip.high,
            self.algo.tis_cap,
            self.algo.kl_coef,
            self._reference_logprobs(sample),
        )
        loss = terms.loss.sum() * weight
        loss.backward()
        return {
            "loss": float(loss.detach()),
            "kl": float(terms.kl.sum()),
            "entropy": float(entropy.sum()),
            "clipped": float(terms.clipped.sum()),
            "mismatch": float((logp.detach() - behaviour).abs().sum()),
        }

    def step(self, samples: list[Sample]) -> dict[str, float]:
        """One optimizer step over the batch; returns loss, kl, entropy, grad_norm,
        clip_fraction, tokens, seconds (and logprob_mismatch: mean |trainer - engine| log-prob)."""
        start = time.perf_counter()
        samples = [s for s in samples if bool(s.loss_mask.any())]
        for s in samples:
            check_image_pads(s, self.policy.merge_size, self.policy.image_pad_id)
        lengths = [int(s.loss_mask.sum()) for s in samples]
        weights = AGGREGATIONS[self.algo.aggregation](lengths)
        totals = dict.fromkeys(("loss", "kl", "entropy", "clipped", "mismatch"), 0.0)
        grad_norm = 0.0
        with self.policy.lock:
            self.policy.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            try:
                for sample, weight in zip(samples, weights, strict=True):
                    for k, v in self._sample_terms(sample, weight).items():
                        totals[k] += v
                if samples:
                    grad_norm = float(self._clip_and_step())
            finally:
                self.policy.model.eval()
        self.steps += 1
        tokens = max(sum(lengths), 1)
        return {
            "loss": totals["loss"],
            "kl": totals["kl"] / tokens,
            "entropy": totals["entropy"] / tokens,
            "grad_norm": grad_norm,
            "clip_fraction": totals["clipped"] / tokens,
            "logprob_mismatch": totals["mismatch"] / tokens,
            "tokens": float(sum(lengths)),
            "samples": float(len(samples)),
            "seconds": time.perf_counter() - start,
        }

    def _clip_and_step(self) -> torch.Tensor:
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, self.algo.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(d["optimizer"])
        self.steps = int(d["steps"])
