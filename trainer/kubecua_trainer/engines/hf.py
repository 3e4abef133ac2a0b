"""Embedded engine: generation on the learner's own module (no weight sync).

Concurrent generate() calls from many episodes are served by one worker thread, so the event loop
never blocks and the model sees batch > 1. Two paths:
- continuous (the default, what the trainer uses): engines/embedded/ (its __init__ says why it
  runs its own loop). A request joins the running batch at the next decode step and leaves when
  it finishes; the KV of a finished turn is kept, so the next turn of the same episode prefills
  only its new tokens (one screenshot and one user turn instead of the whole history). Rows may
  have different sampling parameters.
- static (continuous=False): the earlier path, kept as the reference the benchmark and the tests
  compare with (engines/embedded/static.py).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from typing import Any

import torch
from PIL import Image

from kubecua_trainer.engines.base import EngineError, Generation, SamplingParams
from kubecua_trainer.engines.embedded.images import Screenshots
from kubecua_trainer.engines.embedded.model_runner import ModelRunner
from kubecua_trainer.engines.embedded.prefix_store import PrefixStore
from kubecua_trainer.engines.embedded.scheduler import Scheduler
from kubecua_trainer.engines.embedded.sequence import EngineRecord, Request, Seq
from kubecua_trainer.engines.embedded.static import generate_batch
from kubecua_trainer.model import Policy
from kubecua_trainer.parallel.gpu_share import GpuShare
from kubecua_trainer.parallel.threads import to_thread_on, use_device

log = logging.getLogger(__name__)
_WAKE = object()  # put on the queue by forget_cache: the idle worker frees the KV at once


class HFEngine:
    """Serves concurrent requests on the shared policy module from a worker thread.

    continuous=True: continuous batching with KV reuse (cache_bytes and cache_sequences bound the
    stored KV; hold_seconds is the longest stretch the worker holds policy.lock, so a learner step
    waits at most that long). seed: a private sampling generator (default: torch's global RNG).
    cuda_graphs: replay the decode step from CUDA graphs (CUDA only; keeps a bf16 copy of the
    text model's Linear weights under bf16 autocast: about 6 GB for a 3B model). packed_prefill:
    requests that join together are prefilled packed in one row (False: right-padded to one
    length, the reference the packed path is tested against). share: the GPU shared with a
    learner stepping meanwhile (gpu_share.py): the worker runs on its generation stream, each
    round drains it, and the learner reads work() to start its chunks while the engine idles.
    """

    def __init__(
        self,
        policy: Policy,
        max_batch_size: int = 16,
        continuous: bool = True,
        cache_bytes: int = 4 << 30,
        cache_sequences: int = 256,
        hold_seconds: float = 0.25,
        seed: int | None = None,
        cuda_graphs: bool = False,
        packed_prefill: bool = True,
        share: GpuShare | None = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.continuous = continuous
        self._queue: queue.Queue[Any] = queue.Queue()  # Request, None (close) or _WAKE
        self.batch_sizes: list[int] = []  # requests batched (static) or admitted together
        self.tokens_generated = 0  # with busy_seconds: the engine tokens/s metric
        self.busy_seconds = 0.0
        self.records: deque[EngineRecord] = deque(maxlen=100_000)  # continuous: one per request
        self._forget = threading.Event()
        self._forgotten = threading.Event()
        self._arrivals = 0
        self.scheduler: Scheduler | None = None
        self.share = share
        # For admissible(): requests handed to the worker (written by generate's thread only)
        # and refused unadmitted at close (by the worker only); both only grow.
        self._submitted = 0
        self._dropped = 0
        self.screenshots = Screenshots(policy.processor)
        if continuous:
            generator = None
            if seed is not None:
                generator = torch.Generator(device=policy.device).manual_seed(seed)
            runner = ModelRunner(policy, max_batch_size, cuda_graphs, packed_prefill)
            if share is not None and runner.graphs is not None:
                runner.graphs.fence = share.capture_fence
            store = PrefixStore(cache_bytes, cache_sequences)
            self.scheduler = Scheduler(
                policy, runner, self.screenshots, max_batch_size, store, hold_seconds, generator,
                self._finished,
            )  # fmt: skip
            self.batch_sizes = self.scheduler.admissions
        if share is not None:
            share.watch(self.work)
        self._thread = threading.Thread(target=self._work, name="hf-engine", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        use_device(self.policy.device)  # a new thread starts on GPU 0 (threads.py)
        serve = self._serve_continuous if self.continuous else self._serve
        if self.share is None:
            serve()
            return
        with self.share.generating():  # every kernel and allocation of the worker's
            serve()

    def work(self) -> int:
        """What the worker has to run now: its running rows plus admissible() (gpu_share.py:
        0 means the GPU is the learner's)."""
        b = self.scheduler
        return 0 if b is None else len(b.rows) + self.admissible()

    def admissible(self) -> int:
        """Requests the worker could admit now (queued or pending, as many as rows are free),
        plus those it is admitting (prefilling). Read from other threads (gpu_share.py), from
        counters that only grow, the ones that lower the result read first: a request is never
        missed while it moves from the queue to pending to a row (it may count a moment long)."""
        b = self.scheduler
        if b is None:
            return 0
        admitted, taken, dropped = b.admitted, b.taken, self._dropped
        waiting = self._submitted + b.requeued - taken - dropped
        free = b.max_batch_size - len(b.rows)
        return min(max(waiting, 0), max(free, 0)) + max(taken - admitted, 0)

    async def generate(
        self, prompt_ids: list[int], images: list[Image.Image], sampling: SamplingParams
    ) -> Generation:
        if not self._thread.is_alive():
            raise EngineError("hf engine is closed")
        if not prompt_ids:
            raise EngineError("empty prompt")
        loop = asyncio.get_running_loop()
        req = Request(list(prompt_ids), list(images), sampling, loop.create_future(), loop)
        if self.scheduler is not None and req.images:
            await to_thread_on(self.policy.device, self.screenshots.prepare, req)
        self._submitted += 1  # first: admissible() never misses it
        self._queue.put(req)
        return await req.future

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None:
        """No-op: the engine generates with the learner's own parameters."""

    def forget_cache(self, timeout: float = 0.0) -> bool:
        """Free the stored KV once the engine is idle (e.g. before a learner step whose episodes
        are all finished, when no stored turn will be continued); the worker does it as soon as
        nothing runs. timeout > 0: wait up to that long; True once it is done."""
        if self.scheduler is None:  # the static path keeps no KV between batches
            return True
        self._forgotten.clear()
        self._forget.set()
        self._queue.put(_WAKE)
        return self._forgotten.wait(timeout) if timeout > 0 else False

    async def close(self) -> None:
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    # -- continuous path ---------------------------------------------------------------------

    def _seq(self, req: Request) -> Seq:
        rec = EngineRecord(request=self._arrivals, prompt_tokens=len(req.prompt_ids))
        self._arrivals += 1
        self.records.append(rec)
        return Seq(req, rec, [])

    def _finished(self, seq: Seq, gen: Generation) -> None:
        self.tokens_generated += len(gen.token_ids)
        seq.req.resolve(gen)

    def _serve_continuous(self) -> None:
        b = self.scheduler
        assert b is not None
        pending: deque[Seq] = deque()
        closing = False
        share = self.share

        def drain() -> None:
            nonlocal closing
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    return
                if item is None:
                    closing = True
                elif item is not _WAKE:  # busy: the next idle check forgets
                    pending.append(self._seq(item))

        while True:
            if not pending and not b.rows:
                if closing:
                    return
                try:
                    item = self._queue.get(timeout=0.1 if self._forget.is_set() else 1.0)
                except queue.Empty:
                    item = _WAKE
                if item is _WAKE:
                    forget = self._forget.is_set()
                    self._forget.clear()
                    b.idle(forget)  # free KV the learner may need
                    if forget:
                        self._forgotten.set()
                    continue
                if item is None:
                    closing = True
                    continue
                pending.append(self._seq(item))
            drain()
            if closing:  # finish what runs, refuse what waits
                for seq in pending:
                    seq.req.resolve(EngineError("hf engine closed"))
                self._dropped += len(pending)
                pending.clear()
            start = time.perf_counter()
            try:
                if share is None:
                    b.round(pending, drain)
                else:
                    b.round(pending, drain, share.generation_round)
            except Exception as exc:  # e.g. out of memory: fail what ran, keep serving
                log.exception("hf engine decode step failed")
                for seq in b.fail_running():
                    seq.req.resolve(exc if isinstance(exc, EngineError) else EngineError(str(exc)))
            self.busy_seconds += time.perf_counter() - start
            time.sleep(0)  # let a thread waiting for policy.lock (the learner) take it

    # -- static path -------------------------------------------------------------------------

    def _serve(self) -> None:
        pending: list[Request] = []
        while True:
            if not pending:
                first = self._queue.get()
                if first is None:
                    return
                pending.append(first)
            closing = self._drain(pending)
            batch = [r for r in pending if r.sampling == pending[0].sampling]
            batch = batch[: self.max_batch_size]
            pending = [r for r in pending if r not in batch]
            self._run_batch(batch)
            if closing:
                for r in pending:
                    r.resolve(EngineError("hf engine closed"))
                return

    def _drain(self, pending: list[Request]) -> bool:
        """Move every queued request into pending; True when close() was requested."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            pending.append(item)

    def tokens_per_second(self) -> float:
        """Generated tokens per second of generation time since the engine started."""
        return self.tokens_generated / self.busy_seconds if self.busy_seconds else 0.0

    def _run_batch(self, batch: list[Request]) -> None:
        start = time.perf_counter()
        try:
            gens = generate_batch(self.policy, batch)
        except Exception as exc:  # one bad batch must not kill the worker thread
            log.exception("hf engine batch of %d failed", len(batch))
            for r in batch:
                r.resolve(exc if isinstance(exc, EngineError) else EngineError(str(exc)))
            return
        self.batch_sizes.append(len(batch))
        self.tokens_generated += sum(len(g.token_ids) for g in gens)
        self.busy_seconds += time.perf_counter() - start
        for r, g in zip(batch, gens, strict=True):
            r.resolve(g)
