"""Embedded engine: generation on the learner's own module (no weight sync).

Concurrent generate() calls from many episodes are served by one worker thread, so the event loop
never blocks and the model sees batch > 1. Two paths:
- continuous (the default, what the trainer uses): engines/continuous.py. A request joins the
  running batch at the next decode step and leaves when it finishes; the KV of a finished turn is
  kept, so the next turn of the same episode prefills only its new tokens (one screenshot and one
  user turn instead of the whole history). Rows may have different sampling parameters.
- static (continuous=False): the earlier path, kept as the reference the benchmark compares with.
  Queued requests with the same SamplingParams form one batch for transformers generate(), which
  recomputes each prompt in full; a new request waits until the batch has finished. On an H100,
  batch 8 gave ~7x the tokens/s of batch 1 (95 against 13 tok/s, 3B shape, one 720p image,
  2026-11-21). Behaviour log-probs are recorded inside generate() by a logits processor that
  keeps only the current step's (batch, vocab) log-probs, never all steps' logits.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from PIL import Image
from transformers import LogitsProcessor, LogitsProcessorList

from kubecua_trainer.engines.base import EngineError, Generation, SamplingParams, cut_at_stop
from kubecua_trainer.engines.continuous import ContinuousBatcher, EngineRecord, _Seq
from kubecua_trainer.model import Policy

log = logging.getLogger(__name__)
_WAKE = object()  # put on the queue by forget_cache: the idle worker frees the KV at once


@dataclass(eq=False)  # identity, not field, equality
class _Request:
    prompt_ids: list[int]
    images: list[Image.Image]
    sampling: SamplingParams
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop = field(repr=False)
    # Continuous path: filled in the caller's thread before the request is queued, so the worker
    # (which holds the GPU) does not wait on the CPU for them (ContinuousBatcher.prepare).
    digests: list[bytes] | None = field(default=None, repr=False)
    prepared: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    def resolve(self, result: Generation | BaseException) -> None:
        def _set() -> None:
            if self.future.done():
                return  # the caller was cancelled (episode timeout)
            if isinstance(result, BaseException):
                self.future.set_exception(result)
            else:
                self.future.set_result(result)

        self.loop.call_soon_threadsafe(_set)


class _RecordLogprobs(LogitsProcessor):
    """Applies temperature and top-p itself and records log softmax(logits / T) of sampled ids.

    generate() calls it once per new token; the id sampled at step k is the last column of
    input_ids at step k+1, so the log-prob of step k is gathered then (the final one in finish()).
    """

    def __init__(self, temperature: float, top_p: float, banned: list[int]):
        self.banned = banned
        self.temperature = temperature
        self.top_p = top_p
        self.prev: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._gather(input_ids[:, -1])
        greedy = self.temperature <= 0
        scaled = scores.float() / (1.0 if greedy else self.temperature)
        scaled[:, self.banned] = float("-inf")
        self.prev = torch.log_softmax(scaled, dim=-1)
        if greedy:
            keep = scaled == scaled.max(dim=-1, keepdim=True).values
            return scaled.masked_fill(~keep, float("-inf"))  # type: ignore[return-value]
        if self.top_p < 1.0:
            sorted_lp, order = self.prev.sort(dim=-1, descending=True)
            drop = sorted_lp.exp().cumsum(-1) - sorted_lp.exp() >= self.top_p
            mask = torch.zeros_like(drop).scatter(-1, order, drop)
            return scaled.masked_fill(mask, float("-inf"))  # type: ignore[return-value]
        return scaled  # type: ignore[return-value]

    def _gather(self, last_ids: torch.Tensor) -> None:
        if self.prev is not None:
            self.logprobs.append(self.prev.gather(-1, last_ids[:, None])[:, 0])
            self.prev = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """(batch, new_tokens) log-probs of the sampled ids."""
        self._gather(sequences[:, -1])
        return torch.stack(self.logprobs, dim=1).cpu()


class HFEngine:
    """Serves concurrent requests on the shared policy module from a worker thread.

    continuous=True: continuous batching with KV reuse (cache_bytes and cache_sequences bound the
    stored KV; hold_seconds is the longest stretch the worker holds policy.lock, so a learner step
    waits at most that long). seed: a private sampling generator (default: torch's global RNG).
    cuda_graphs: replay the decode step from CUDA graphs (CUDA only; keeps a bf16 copy of the
    text model's Linear weights under bf16 autocast: about 6 GB for a 3B model).
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
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.continuous = continuous
        self._queue: queue.Queue[Any] = queue.Queue()  # _Request, None (close) or _WAKE
        self.batch_sizes: list[int] = []  # requests batched (static) or admitted together
        self.tokens_generated = 0  # with busy_seconds: the engine tokens/s metric
        self.busy_seconds = 0.0
        self.records: deque[EngineRecord] = deque(maxlen=100_000)  # continuous: one per request
        self._forget = threading.Event()
        self._forgotten = threading.Event()
        self._arrivals = 0
        self.batcher: ContinuousBatcher | None = None
        if continuous:
            generator = None
            if seed is not None:
                generator = torch.Generator(device=policy.device).manual_seed(seed)
            self.batcher = ContinuousBatcher(
                policy, max_batch_size, cache_bytes, cache_sequences, hold_seconds, generator,
                self._finished, cuda_graphs,
            )  # fmt: skip
            self.batch_sizes = self.batcher.admissions
        target = self._serve_continuous if continuous else self._serve
        self._thread = threading.Thread(target=target, name="hf-engine", daemon=True)
        self._thread.start()

    async def generate(
        self, prompt_ids: list[int], images: list[Image.Image], sampling: SamplingParams
    ) -> Generation:
        if not self._thread.is_alive():
            raise EngineError("hf engine is closed")
        if not prompt_ids:
            raise EngineError("empty prompt")
        loop = asyncio.get_running_loop()
        req = _Request(list(prompt_ids), list(images), sampling, loop.create_future(), loop)
        if self.batcher is not None and req.images:
            await asyncio.to_thread(self.batcher.prepare, req)
        self._queue.put(req)
        return await req.future

    async def update_weights(self, step: int, checkpoint_dir: str | None) -> None:
        """No-op: the engine generates with the learner's own parameters."""

    def forget_cache(self, timeout: float = 0.0) -> bool:
        """Free the stored KV once the engine is idle (e.g. before a learner step whose episodes
        are all finished, when no stored turn will be continued); the worker does it as soon as
        nothing runs. timeout > 0: wait up to that long; True once it is done."""
        if self.batcher is None:  # the static path keeps no KV between batches
            return True
        self._forgotten.clear()
        self._forget.set()
        self._queue.put(_WAKE)
        return self._forgotten.wait(timeout) if timeout > 0 else False

    async def close(self) -> None:
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    # -- continuous path ---------------------------------------------------------------------

    def _seq(self, req: _Request) -> _Seq:
        rec = EngineRecord(request=self._arrivals, prompt_tokens=len(req.prompt_ids))
        self._arrivals += 1
        self.records.append(rec)
        return _Seq(req, rec, [])

    def _finished(self, seq: _Seq, gen: Generation) -> None:
        self.tokens_generated += len(gen.token_ids)
        seq.req.resolve(gen)

    def _serve_continuous(self) -> None:
        b = self.batcher
        assert b is not None
        pending: deque[_Seq] = deque()
        closing = False

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
                pending.clear()
            start = time.perf_counter()
            try:
                b.round(pending, drain)
            except Exception as exc:  # e.g. out of memory: fail what ran, keep serving
                log.exception("hf engine decode step failed")
                for seq in b.fail_running():
                    seq.req.resolve(exc if isinstance(exc, EngineError) else EngineError(str(exc)))
            self.busy_seconds += time.perf_counter() - start
            time.sleep(0)  # let a thread waiting for policy.lock (the learner) take it

    # -- static path -------------------------------------------------------------------------

    def _serve(self) -> None:
        pending: list[_Request] = []
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

    def _drain(self, pending: list[_Request]) -> bool:
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

    def _run_batch(self, batch: list[_Request]) -> None:
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


def _batch_inputs(policy: Policy, batch: list[_Request]) -> dict[str, Any]:
    """Left-pad the prompts and process the images, checking pads against the grids."""
    pad_id = policy.tokenizer.pad_token_id
    width = max(len(r.prompt_ids) for r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    images: list[Image.Image] = []
    for i, r in enumerate(batch):
        ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
        attn[i, width - len(r.prompt_ids) :] = 1
        images += r.images
    out: dict[str, Any] = {"input_ids": ids, "attention_mask": attn}
    out["mm_token_type_ids"] = (ids == policy.image_pad_id).long()  # 1 = image token
    if images:
        proc = policy.processor.image_processor(images=images, return_tensors="pt")
        out["pixel_values"], out["image_grid_thw"] = proc["pixel_values"], proc["image_grid_thw"]
    pads = int((ids == policy.image_pad_id).sum())
    grid = out.get("image_grid_thw")
    expected = 0 if grid is None else int(grid.prod(-1).sum()) // policy.merge_size**2
    if pads != expected:
        raise EngineError(f"prompts hold {pads} image pads but the images need {expected}")
    return {k: v.to(policy.device) for k, v in out.items()}


def generate_batch(policy: Policy, batch: list[_Request]) -> list[Generation]:
    """Sample one batch (same SamplingParams) with the policy's module."""
    s = batch[0].sampling
    inputs = _batch_inputs(policy, batch)
    recorder = _RecordLogprobs(s.temperature, s.top_p, policy.banned_ids)
    stop = list(s.stop_token_ids) or None
    with policy.lock, torch.no_grad(), policy.autocast():
        version = policy.version
        policy.model.eval()
        seqs = policy.model.generate(  # type: ignore[operator]
            **inputs,
            do_sample=True,
            temperature=1.0,  # the recorder applies temperature and top-p itself
            top_p=1.0,
            top_k=0,
            repetition_penalty=1.0,
            max_new_tokens=s.max_new_tokens,
            eos_token_id=stop,
            pad_token_id=policy.tokenizer.pad_token_id,
            logits_processor=LogitsProcessorList([recorder]),
            use_cache=True,
        )
    new = seqs[:, inputs["input_ids"].shape[1] :].cpu()
    logprobs = recorder.finish(seqs)
    cut = [
        cut_at_stop(new[i].tolist(), logprobs[i].tolist(), s.stop_token_ids, s.max_new_tokens)
        for i in range(len(batch))
    ]
    return [replace(g, policy_version=version) for g in cut]
