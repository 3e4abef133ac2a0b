"""AdamW with fp32 master weights for a model whose own parameters are bf16, optionally offloaded
to host memory (ZeRO-Offload style).

Why: a 3.75B-parameter model trained with fp32 weights + AdamW needs 16 bytes per parameter on
the GPU (60 GiB) before any activation. Here the GPU holds only the bf16 weights and bf16
gradients (4 bytes per parameter, 15 GiB); the fp32 master copy and both moments (12 bytes per
parameter, 45 GiB) live on the GPU or, with offload, in pinned host memory, where torch's fused
CPU AdamW updates them. The update is the same fp32 AdamW; the bf16 weights are re-rounded from the
master copy after every step, so no update is lost to bf16 rounding.

The offloaded step is pipelined (issue 24 item 3): the parameters are cut into chunks of about
CHUNK_BYTES; every chunk's gradients go to the host on a copy stream at once, and while the host
updates chunk k, chunk k+1's gradients are still arriving and chunk k-1's new weights already go
back on a second copy stream. The host's fp32 gradient buffers are kept from step to step (the
serial path allocated 4 bytes per parameter afresh every step: 15 GB of page faults for a 3B
model). Each chunk runs the same fused AdamW kernel over its own parameters, an elementwise
update, so the results are bitwise those of the serial path (pipeline=False, kept as the
reference: trainer/tests/test_perf_guard.py compares them).

defer=True takes the host update off the learner's critical path: step() only queues the
gradients' copies to the host and returns; a worker thread runs the same update and copies back,
and settle() waits for it. The learner hands settle() to the policy's lock (weights_lock.py), so
the next reader of the weights (the next step's first generation, a checkpoint, the next
learner step) waits for it, while the next step's desktops are being set up meanwhile. The bits
are the same: the same code runs, in another thread. On an H100 the GRPO batch step's own time
went from 0.81 to 0.96 of the forward-and-backward rate (docs/benchmarks.md). What it leaves
out: overlapping the update with the next learner forward when steps run back to back (that
forward needs the new weights; the worker's update also ran slower than the in-step one there,
so learner_setup.defers_update defers only in synchronous embedded-engine runs), and keeping the
state on the GPU by itself when it would fit (offload is the spec's choice).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

CHUNK_BYTES = 256 << 20  # fp32 master bytes per pipelined chunk (about 64M parameters)
SLICE_ELEMENTS = 1 << 20  # the host update's slice: 18 MB of gradient, weights and moments


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
        pipeline: bool = True,
        defer: bool = False,
        chunk_bytes: int = CHUNK_BYTES,
        slice_elements: int = SLICE_ELEMENTS,
    ):
        if slice_elements <= 0 or slice_elements % 65536:
            raise ValueError(f"slice_elements must be a multiple of 65536, got {slice_elements}")
        defaults = {"lr": lr, "weight_decay": weight_decay, "betas": betas, "eps": eps}
        super().__init__(list(params), defaults)
        live = self._live()
        self.offload = offload
        self.pipeline = pipeline
        self.defer = defer and offload and pipeline  # only the pipelined offload has a host half
        self.slice_elements = slice_elements
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
        self._grad32: list[torch.Tensor] | None = None  # the pipeline's fp32 gradients, kept
        self._chunks = _chunks([m.numel() * 4 for m in self.master], chunk_bytes)
        self._streams: tuple[torch.cuda.Stream, torch.cuda.Stream] | None = None
        # the last step's seconds on the caller's path ("total"), with the update's phases when
        # it ran inline; every finished update's phases, the deferred ones' included, in order
        self.last_seconds: dict[str, float] = {}
        self.updates: deque[dict[str, float]] = deque(maxlen=256)
        self._pending: Future[dict[str, float]] | None = None
        self._settling = threading.Lock()
        self._worker: ThreadPoolExecutor | None = None
        self.inner = torch.optim.AdamW(
            self.master, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True
        )

    def _live(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        self.settle()  # (the inner groups' params change during an update)
        for g, inner in zip(self.param_groups, self.inner.param_groups, strict=False):
            inner.update({k: g[k] for k in ("lr", "weight_decay", "betas", "eps")})
        if not (self.offload and self.pipeline):
            self._step_serial()
            return
        start = time.perf_counter()
        launched = self._launch()
        if self.defer:
            if self._worker is None:
                threads = torch.get_num_threads()  # the host update's, as in the caller's thread
                # and the caller's GPU: a new thread starts on GPU 0 (parallel/threads.py)
                device = torch.cuda.current_device() if torch.cuda.is_available() else None
                self._worker = ThreadPoolExecutor(
                    1, "adamw-host", initializer=_host_worker, initargs=(threads, device)
                )
            self._pending = self._worker.submit(self._finish, launched)
            self.last_seconds = {"total": time.perf_counter() - start}
        else:
            phases = self._finish(launched)
            self.updates.append(phases)
            self.last_seconds = {**phases, "total": time.perf_counter() - start}

    @property
    def in_flight(self) -> bool:
        """A deferred update has not been settled yet."""
        return self._pending is not None

    def settle(self) -> None:
        """Wait for a deferred update (a no-op when none is pending). A failed update raises
        here, and again at every later call: its weights are half-written."""
        with self._settling:
            if self._pending is None:
                return
            phases = self._pending.result()
            self._pending = None
            self.updates.append(phases)

    def _step_serial(self) -> None:
        """One PCIe copy of every gradient, one AdamW over all masters, one copy back."""
        live = self._live()
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

    def _launch(self) -> _Launched:
        """The caller's half: every chunk's gradients queued to the host on the copy stream.
        The caller may zero the gradients when this returns: _Launched holds them until the
        update has read them."""
        live = self._live()
        staging: list[torch.Tensor] = self._staging  # type: ignore[assignment]
        grads = [p.grad for p in live]
        cuda = live[0].is_cuda if live else False
        arrived: list[Any] = []
        if cuda:
            if self._streams is None:
                self._streams = (torch.cuda.Stream(), torch.cuda.Stream())
            d2h, h2d = self._streams
            d2h.wait_stream(torch.cuda.current_stream())  # the gradients are final (clipped)
            h2d.wait_stream(torch.cuda.current_stream())  # nothing reads the weights any more
            # (the last step's copies back have finished: _finish ends by waiting for them)
            with torch.cuda.stream(d2h):
                for chunk in self._chunks:
                    for i in chunk:
                        grad = grads[i]
                        if grad is not None:
                            staging[i].copy_(grad, non_blocking=True)
                    arrived.append(d2h.record_event())
        return _Launched(grads, arrived, cuda)

    @torch.no_grad()
    def _finish(self, launched: _Launched) -> dict[str, float]:
        """The host's half, in the caller's thread or the worker's: per chunk, wait for its
        gradients, update, and copy its new weights back on the second stream."""
        start = time.perf_counter()
        live, grads, cuda = self._live(), launched.grads, launched.cuda
        staging: list[torch.Tensor] = self._staging  # type: ignore[assignment]
        if self._grad32 is None:
            self._grad32 = [torch.empty_like(m) for m in self.master]
        waited = host = 0.0
        group = self.inner.param_groups[0]
        everything = group["params"]
        try:
            for k, chunk in enumerate(self._chunks):
                t0 = time.perf_counter()
                if cuda:
                    launched.arrived[k].synchronize()
                t1 = time.perf_counter()
                stepped = [i for i in chunk if grads[i] is not None]
                if not cuda:
                    for i in stepped:
                        staging[i].copy_(grads[i])  # type: ignore[arg-type]
                sliced = self._sliceable(stepped)
                if sliced:  # (converts its slices back to bf16 itself)
                    self._update_in_slices(stepped)
                else:  # the first step: torch's AdamW creates the state
                    self._update_whole(stepped, group)
                done = set(stepped) if sliced else set()
                for i in chunk:
                    if i not in done:
                        staging[i].copy_(self.master[i])
                if cuda:
                    with torch.cuda.stream(self._streams[1]):  # type: ignore[index]
                        for i in chunk:
                            live[i].copy_(staging[i], non_blocking=True)
                else:
                    for i in chunk:
                        live[i].copy_(staging[i])
                waited += t1 - t0
                host += time.perf_counter() - t1
        finally:
            group["params"] = everything
        t2 = time.perf_counter()
        if cuda:
            # the staging buffers are rewritten by the next step's copies, and the next forward
            # reads the new weights: both wait for the copies back
            self._streams[1].synchronize()  # type: ignore[index]
        return {
            "wait_gradients": waited,
            "host_update": host,
            "wait_weights": time.perf_counter() - t2,
            "update": time.perf_counter() - start,
        }

    def _update_whole(self, stepped: list[int], group: dict[str, Any]) -> None:
        """torch's AdamW step over these parameters (it creates their state when missing)."""
        assert self._grad32 is not None
        mine = []
        for i in stepped:
            m = self.master[i]
            m.grad = self._grad32[i].copy_(self._staging[i])  # type: ignore[arg-type]
            mine.append(m)
        if mine:
            group["params"] = mine  # the same fused kernel, over this chunk only
            self.inner.step()
        for m in mine:
            m.grad = None

    def _sliceable(self, stepped: list[int]) -> bool:
        """Every parameter has its AdamW state and is contiguous (so slices are views)."""
        for i in stepped:
            state = self.inner.state.get(self.master[i])
            if not state:
                return False
            tensors = (self.master[i], state["exp_avg"], state["exp_avg_sq"])
            if not all(t.is_contiguous() for t in tensors):
                return False
        return True

    def _update_in_slices(self, stepped: list[int]) -> None:
        """The AdamW step in slices of slice_elements, each converted in, updated and converted
        out while it is in the CPU's cache (the whole-tensor passes go through memory three times
        more). It calls the fused kernel that torch's AdamW calls, with the same arguments, over
        slices that start at multiples of 65,536 elements: an elementwise update whose vector
        lanes fall where they fall in one call, so the bits are the same."""
        assert self._grad32 is not None
        group = self.inner.param_groups[0]
        states = [self.inner.state[self.master[i]] for i in stepped]
        if states:
            torch._foreach_add_([st["step"] for st in states], 1)  # as torch's step() does
        flat = [
            (self.master[i].view(-1), self._grad32[i].view(-1), self._staging[i].view(-1))  # type: ignore[union-attr]
            for i in stepped
        ]
        moments = [(st["exp_avg"].view(-1), st["exp_avg_sq"].view(-1)) for st in states]
        sizes = [m.numel() for m, _, _ in flat]
        for batch in _slices(sizes, self.slice_elements):
            ms, gs, eas, eass, steps = [], [], [], [], []
            for j, a, b in batch:
                master, grad32, staged = flat[j]
                ms.append(master[a:b])
                gs.append(grad32[a:b].copy_(staged[a:b]))  # bf16 -> fp32 is exact
                eas.append(moments[j][0][a:b])
                eass.append(moments[j][1][a:b])
                steps.append(states[j]["step"])
            beta1, beta2 = group["betas"]
            torch._fused_adamw_(
                ms, gs, eas, eass, [], steps, amsgrad=group["amsgrad"], lr=group["lr"],
                beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
                maximize=group["maximize"], grad_scale=None, found_inf=None,
            )  # fmt: skip
            for (j, a, b), m in zip(batch, ms, strict=True):
                flat[j][2][a:b].copy_(m)

    @torch.no_grad()
    def adopt_masters(self, other: MasterAdamW) -> None:
        """Go on from other's fp32 master weights (the warm-up's optimizer over the same
        parameters): its updates reached the bf16 weights but not this optimizer's masters,
        whose next step would otherwise write the weights from before the warm-up back."""
        other.settle()
        self.settle()
        for mine, theirs in zip(self.master, other.master, strict=True):
            mine.copy_(theirs)

    def state_dict(self) -> dict[str, Any]:
        self.settle()
        return {"inner": self.inner.state_dict(), "master": [m.clone() for m in self.master]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.settle()
        self.inner.load_state_dict(state_dict["inner"])
        live = self._live()
        with torch.no_grad():
            for p, m, saved in zip(live, self.master, state_dict["master"], strict=True):
                m.copy_(saved)
                p.copy_(m)


@dataclass
class _Launched:
    grads: list[torch.Tensor | None]  # the step's gradients, held until the update has read them
    arrived: list[Any]  # per chunk, the event of its gradients' copy to the host (CUDA)
    cuda: bool


def _slices(sizes: list[int], limit: int) -> list[list[tuple[int, int, int]]]:
    """Batches of (tensor, start, end) of at most `limit` elements: small tensors whole and
    together, a larger one alone in slices of `limit` (a multiple of 65,536) from its start.

    Example: sizes [3, 4, 10], limit 8 -> [[(0, 0, 3), (1, 0, 4)], [(2, 0, 8)], [(2, 8, 10)]].
    """
    out: list[list[tuple[int, int, int]]] = []
    total = limit  # start a new batch first
    for j, n in enumerate(sizes):
        if n > limit:
            out += [[(j, a, min(n, a + limit))] for a in range(0, n, limit)]
            total = limit
        elif total + n <= limit:
            out[-1].append((j, 0, n))
            total += n
        else:
            out.append([(j, 0, n)])
            total = n
    return out


def _chunks(sizes: list[int], limit: int) -> list[list[int]]:
    """Consecutive indices grouped up to `limit` bytes each (a larger tensor is a chunk alone).

    Example: sizes [4, 4, 8, 2] with limit 8 -> [[0, 1], [2], [3]]."""
    out: list[list[int]] = []
    total = 0
    for i, n in enumerate(sizes):
        if out and total + n <= limit:
            out[-1].append(i)
            total += n
        else:
            out.append([i])
            total = n
    return out


def _host_worker(threads: int, device: int | None) -> None:
    torch.set_num_threads(threads)
    if device is not None:
        torch.cuda.set_device(device)
