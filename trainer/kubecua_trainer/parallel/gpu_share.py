"""One GPU shared by generation and learning while rollouts overlap learning (rollout.maxStaleness
>= 1 with the embedded engine in one process: the engine generates with its own copy of the
weights in its worker thread while the learner steps in another thread).

Why the overlap was slower than the synchronous loop (0.63x on an H100, 2026-11-27,
docs/benchmarks.md): both threads launched their kernels on the legacy default CUDA stream, one
in-order queue for the whole GPU. The learner queues a sample's forward and backward far ahead of
the GPU (thousands of kernels, up to the driver's queue depth); every decode step of the engine
ends in a host sync on its sampled ids (engines/embedded/sampling.py), and on one stream that sync
waits for every learner kernel queued before the step's own. A decode step of milliseconds waited
for the learner's backlog, and a prefill too, so the rollouts of the next step crawled while the
learner ran: the GPU was never idle, but generation, whose latency is the desktops' waiting time,
set the step's length. (The learner's own figure was lower in that run for two more reasons:
with maxStaleness >= 1 the offloaded AdamW's host update runs inside the step, not deferred
(learner_setup.defers_update), and each sample's host syncs also waited behind the engine's
kernels.)

What GpuShare does instead:
- Two CUDA streams: generation on the highest priority, learning on the lowest. The GPU's block
  scheduler dispatches the high-priority stream's blocks first as SMs free up, so a decode step
  waits for the learner's blocks already running, not for its queue.
- Streams alone were not enough (2026-11-28, one H200, in one call `python -m bench.loop_bench
  --tasks-per-step 8 --no-learner-bench` with `--modes staleness_1 --steps 4`, then `--modes sync
  --steps 3`; steady state; with a chunk rule that waited only for admissions): 77.5
  trajectories/min against 82.3 synchronous, the learner at 3,505 tokens/s against 8,867 alone,
  prefill and decode each about half their synchronous rates while both ran. Everything slowed
  alike, high priority or not, which points at the host (our reading of the figures; no profile was
  taken): the two threads take turns on the GIL (the learner's compiled and checkpointed Python, the
  engine's prefill launches and per-token bookkeeping), so running both at once runs neither at its
  speed. So the two mostly take turns instead: learning runs in chunks, one sample's forward and
  backward (the gradient accumulation's unit, so the arithmetic is untouched), and a chunk starts
  only when the engine has nothing to run (no running row, no request it could admit), i.e. while
  every desktop acts, or once it has waited max_yield_seconds, so learning never starves behind a
  busy engine. The engine does not wait for the learner (but for a rare graph capture, below): a
  request that comes during a chunk runs at once, on the high-priority stream, and only that chunk's
  tail overlaps it. In the synchronous loop those waits are the GPU's idle 28% (docs/benchmarks.md);
  the learner now fills them with the next update.
- A CUDA graph capture of the engine (a new decode batch size) and the learner's device-wide
  syncs (inductor's autotuning on the first calls, the offloaded AdamW's step) exclude each other
  (capture_fence): a device-wide sync while another thread captures fails with "operation not
  permitted when stream is capturing" (seen on an H200, 2026-11-28, the learner's first step).
  The learner holds the fence for each chunk and for the optimizer's step; a capture, rare (one a
  batch-size bucket and KV width), waits for the chunk in flight.
- Python's switch interval drops to SWITCH_INTERVAL_SECONDS on the GPU: where the two threads do
  overlap, the engine's thread waits at most that long for the GIL (5 ms by default, per
  acquisition, several per decode step).
- Stream hygiene, so the streams change no result: each side allocates on its own stream (the
  engine's worker runs on its stream for its whole life, the learner for its step), so the caching
  allocator never hands a block one stream still uses to the other; each side orders itself after
  the default stream on entry (weights written there: a refresh, a checkpoint load, the warm-up)
  and drains its stream before it releases its lock (the engine each round, gen.lock; the learner
  each step, policy.lock), so the weights change hands only when no kernel reads or writes them.
On the CPU there are no streams and the switch interval stays: the chunk rule runs the same, so
the CPU tests exercise the scheduling. What does not change: the staleness bound
(train._loop launches the rollouts ahead as before), truncated importance sampling (the engine
records behaviour log-probs as before), token-exact rollouts, and the learner's bits (the same
samples in the same order: a chunk only starts later).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

# The longest a learner chunk waits for the engine to idle; past it the chunk starts anyway. A
# desktop's action lasts seconds, so an engine busy that long means the desktops keep it busy and
# the learner must share: 1 s bounds the learner's loss to 1 s a sample (8 s a step of 8).
MAX_YIELD_SECONDS = 1.0
# Issue 46 (one H200, 2026-11-29, docs/benchmarks.md): at 8 groups the fixed 1 s bound made the
# learner's 64 chunks wait 10 s a step while the next step's rollouts were done early (123.2
# trajectories/min); no wait at all made generation the bound instead (109.0). ADAPTIVE_YIELD
# moves the bound between steps by which side the loop waited for (adapt()); off until a GPU
# run measures it faster (bench-loop's staleness_1_adaptive mode sets it).
ADAPTIVE_YIELD = False
MIN_YIELD_SECONDS = 0.02
SWITCH_INTERVAL_SECONDS = 0.0005
_POLL_SECONDS = 0.002  # how often a yielding learner looks again (a sleep: the GIL is free)
# torch clamps a priority to the device's range (lower numbers are higher priorities; 0 is the
# lowest and the default streams' own): these ask for the highest and the lowest.
HIGHEST_PRIORITY = -100
LOWEST_PRIORITY = 0


@dataclass
class Chunk:
    """One learner chunk's start: time.time() it started, the seconds it waited for the engine,
    and what the engine still had to run then (0 unless the wait hit its bound)."""

    started: float
    waited: float
    engine_work: int


class GpuShare:
    """The engine calls watch() once with its work(), runs its worker inside generating(), each
    round inside generation_round() and each graph capture inside capture_fence(); the learner
    runs its step inside learning(), each sample's forward and backward inside chunk() and its
    optimizer step inside capture_fence()."""

    def __init__(
        self,
        device: torch.device,
        max_yield_seconds: float = MAX_YIELD_SECONDS,
        adaptive: bool = False,
    ):
        self.device = device
        self.max_yield_seconds = max_yield_seconds
        self.ceiling = max_yield_seconds  # adapt() never goes above the bound it was given
        self.adaptive = adaptive
        cuda = device.type == "cuda"
        self.generation_stream = torch.cuda.Stream(device, HIGHEST_PRIORITY) if cuda else None
        self.learning_stream = torch.cuda.Stream(device, LOWEST_PRIORITY) if cuda else None
        self._engine_work: Callable[[], int] = lambda: 0
        self.yielding = threading.Event()  # set while a chunk waits for the engine (tests)
        self._fence = threading.Lock()  # a graph capture or a learner chunk, not both
        self.chunks: deque[Chunk] = deque(maxlen=100_000)
        self._step_start = 0  # index into chunks where the current learner step began
        self._switch_interval: float | None = None  # the process's own, while ours is set

    def open(self) -> None:
        """On the GPU, Python's switch interval at SWITCH_INTERVAL_SECONDS until close()."""
        if self.generation_stream is not None and self._switch_interval is None:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)

    def close(self) -> None:
        """The process's own switch interval back (the run is over: a bench's next mode)."""
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None

    def watch(self, engine_work: Callable[[], int]) -> None:
        """engine_work(): the engine's running rows plus the requests it could admit now or is
        admitting (HFEngine.work); called from the learner's thread."""
        self._engine_work = engine_work

    def describe(self) -> str:
        chunks = (
            f"a learner chunk (one sample's forward and backward) waits up to "
            f"{self.max_yield_seconds:g} s for the engine to idle"
        )
        if self.generation_stream is None:
            return f"one device shared by generation and learning (CPU, no streams): {chunks}"
        low = self.learning_stream.priority if self.learning_stream is not None else 0
        return (
            f"one GPU shared by generation and learning: generation on a CUDA stream of priority "
            f"{self.generation_stream.priority}, learning on one of priority {low}; {chunks}; "
            f"Python's switch interval {SWITCH_INTERVAL_SECONDS * 1e3:g} ms"
        )

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """The engine's worker, for its whole life: its kernels and allocations on the
        generation stream."""
        with _on(self.generation_stream):
            yield

    @contextlib.contextmanager
    def generation_round(self) -> Iterator[None]:
        """One engine round (under the engine's policy lock): after whatever the default stream
        holds (a weight refresh), and drained before the lock goes, so a refresh that takes the
        lock next never writes weights a queued kernel still reads."""
        with self._after_default_drained(self.generation_stream):
            yield

    @contextlib.contextmanager
    def learning(self) -> Iterator[None]:
        """A learner step (under policy.lock): on the learning stream, after the default
        stream's work; its stream drained at the end, so whoever takes policy.lock next (the
        weight refresh, a checkpoint) reads final weights on any stream."""
        self._step_start = len(self.chunks)
        with _on(self.learning_stream), self._after_default_drained(self.learning_stream):
            yield

    @contextlib.contextmanager
    def _after_default_drained(self, stream: torch.cuda.Stream | None) -> Iterator[None]:
        """The stream orders itself after the default stream's work on entry and is drained on
        exit (nothing on the CPU)."""
        if stream is not None:
            stream.wait_stream(torch.cuda.default_stream(self.device))
        try:
            yield
        finally:
            if stream is not None:
                stream.synchronize()

    @contextlib.contextmanager
    def chunk(self) -> Iterator[None]:
        """One learner chunk: after the engine's work (before_chunk), apart from any capture."""
        self.before_chunk()
        with self._fence:
            yield

    def capture_fence(self) -> contextlib.AbstractContextManager[object]:
        """Held by the engine around a CUDA graph capture, by the learner around a chunk and its
        optimizer step (the device-wide syncs)."""
        return self._fence

    def before_chunk(self) -> None:
        """Wait while the engine has work (at most max_yield_seconds), then record the chunk's
        start."""
        start = time.perf_counter()
        work = self._engine_work()
        if work:
            self.yielding.set()
            try:
                while work and time.perf_counter() - start < self.max_yield_seconds:
                    time.sleep(_POLL_SECONDS)
                    work = self._engine_work()
            finally:
                self.yielding.clear()
        self.chunks.append(Chunk(time.time(), time.perf_counter() - start, work))

    def adapt(self, rollouts_ready: bool) -> None:
        """Between learner steps (adaptive only): the bound halves when the step's rollouts were
        already played as the learner came for them (the engine had time to spare: the learner
        waited for nothing it needed) and doubles when the learner had to wait for them (the
        engine is the bound: give it more of the GPU), within [MIN_YIELD_SECONDS, the bound
        given]. A halving and a doubling cancel, so the bound settles where the two sides
        finish together.

        >>> s = GpuShare(torch.device("cpu"), 1.0, adaptive=True)
        >>> s.adapt(True); s.adapt(True); s.max_yield_seconds
        0.25
        >>> s.adapt(False); s.max_yield_seconds
        0.5
        """
        if not self.adaptive:
            return
        if rollouts_ready:
            self.max_yield_seconds = max(MIN_YIELD_SECONDS, self.max_yield_seconds / 2)
        else:
            self.max_yield_seconds = min(self.ceiling, self.max_yield_seconds * 2)

    def step_stats(self) -> dict[str, float]:
        """The current learner step's chunks: how many waited, for how long in all, and how many
        started at the bound with the engine still admitting."""
        mine = list(self.chunks)[self._step_start :]
        return {
            "share_chunks": float(len(mine)),
            "share_yields": float(sum(1 for c in mine if c.waited > 0)),
            "share_yield_seconds": sum(c.waited for c in mine),
            "share_yield_timeouts": float(sum(1 for c in mine if c.engine_work)),
            "share_yield_bound": self.max_yield_seconds,
        }


def _on(stream: torch.cuda.Stream | None) -> contextlib.AbstractContextManager[object]:
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def share_for(device: torch.device, overlap: bool, wanted: bool) -> GpuShare | None:
    """The run's GpuShare: where one process's embedded engine generates with its own copy
    of the weights while the learner steps (overlap), unless switched off (wanted False: the
    bench's unshared comparison); logged."""
    if not overlap:
        return None
    if not wanted:
        log.info("GPU sharing off: generation and learning launch on the default stream")
        return None
    share = GpuShare(device, MAX_YIELD_SECONDS, ADAPTIVE_YIELD)  # read now: a bench mode sets them
    share.open()
    log.info("%s", share.describe())
    return share
