"""AdamW with fp32 master weights for a model whose own parameters are bf16, optionally offloaded
to host memory (ZeRO-Offload style).

Why: a 3.75B-parameter model trained with fp32 weights + AdamW needs 16 bytes per parameter on
the GPU (60 GiB) before any activation. Here the GPU holds only the bf16 weights and bf16
gradients (4 bytes per parameter, 15 GiB); the fp32 master copy and both moments (12 bytes per
parameter, 45 GiB) live on the GPU or, with offload, in pinned host memory, where torch's fused
CPU AdamW updates them. The update is the same fp32 AdamW; the bf16 weights are re-rounded from the
master copy after every step, so no update is lost to bf16 rounding.
What it leaves out: overlapping the host update with the next forward.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class MasterAdamW(torch.optim.Optimizer):
    """param_groups hold the live (bf16) parameters, so gradient clipping and the learning-rate
    schedule work on them as usual; step() runs AdamW on the fp32 masters and copies back."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        offload: bool = False,
    ):
        defaults = {"lr": lr, "weight_decay": weight_decay, "betas": betas, "eps": eps}
        super().__init__(list(params), defaults)
        live = self._live()
        self.offload = offload
        pin = offload and torch.cuda.is_available()
        device = torch.device("cpu") if offload else None
        self.master = [
            p.detach().to(device=device or p.device, dtype=torch.float32, copy=True) for p in live
        ]
        if pin:
            self.master = [m.pin_memory() for m in self.master]
        # A host-side bf16 staging buffer per parameter: one PCIe copy each way per step.
        self._staging = [
            torch.empty_like(m, dtype=p.dtype, pin_memory=pin) if offload else None
            for m, p in zip(self.master, live, strict=True)
        ]
        self.inner = torch.optim.AdamW(
            self.master, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True
        )

    def _live(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        live = self._live()
        for g, inner in zip(self.param_groups, self.inner.param_groups, strict=False):
            inner.update({k: g[k] for k in ("lr", "weight_decay", "betas", "eps")})
        for p, m, buf in zip(live, self.master, self._staging, strict=True):
            if p.grad is None:
                m.grad = None
            elif buf is None:
                m.grad = p.grad.to(torch.float32)
            else:
                buf.copy_(p.grad, non_blocking=True)
        if self.offload and torch.cuda.is_available():
            torch.cuda.synchronize()  # the staged gradients have landed in host memory
        for p, m, buf in zip(live, self.master, self._staging, strict=True):
            if buf is not None and p.grad is not None:
                m.grad = buf.to(torch.float32)
        self.inner.step()
        for p, m, buf in zip(live, self.master, self._staging, strict=True):
            m.grad = None
            if buf is None:
                p.copy_(m)
            else:
                buf.copy_(m)
                p.copy_(buf, non_blocking=True)
        if self.offload and torch.cuda.is_available():
            torch.cuda.synchronize()  # staging buffers are reused next step

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "master": [m.clone() for m in self.master]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.inner.load_state_dict(state_dict["inner"])
        live = self._live()
        with torch.no_grad():
            for p, m, saved in zip(live, self.master, state_dict["master"], strict=True):
                m.copy_(saved)
                p.copy_(m)
