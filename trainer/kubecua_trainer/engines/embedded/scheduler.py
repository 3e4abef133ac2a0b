"""The scheduler: the worker's state (running rows, the prefix store, the weights they were
computed with) and its steps: admit (prefix lookup, then prefill of the rest), decode, leave.
Every method runs in the engine's worker thread; `round` is called with pending requests and holds
policy.lock, so the learner never sees the module mid-generation."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from kubecua_trainer.engines.base import EngineError, Generation
from kubecua_trainer.engines.embedded.attention import engine_mode
from kubecua_trainer.engines.embedded.images import Screenshots, pad_runs
from kubecua_trainer.engines.embedded.keyed import key_of
from kubecua_trainer.engines.embedded.model_runner import ModelRunner
from kubecua_trainer.engines.embedded.prefix_store import PrefixEntry, PrefixStore
from kubecua_trainer.engines.embedded.sampling import sample_rows
from kubecua_trainer.engines.embedded.sequence import Plan, Seq
from kubecua_trainer.model import Policy

log = logging.getLogger(__name__)

# Requests admitted together are prefilled in one forward of at most this many new tokens
# (padded tokens, for the padded path): a small prefill is bound by the host launching ~3,400
# kernels (about 100 ms for a 3B model on an H100, docs/benchmarks.md), so one forward for eight
# requests costs about what one did.
PREFILL_BATCH_TOKENS = 16_384


class Scheduler:
    def __init__(
        self,
        policy: Policy,
        runner: ModelRunner,
        screenshots: Screenshots,
        max_batch_size: int,
        store: PrefixStore,
        hold_seconds: float,
        generator: torch.Generator | None,
        on_finish: Callable[[Seq, Generation], None],
    ):
        self.policy, self.runner, self.screenshots = policy, runner, screenshots
        self.kv = runner.kv
        self.max_batch_size = max_batch_size
        self.store = store
        self.hold_seconds = hold_seconds
        self.generator = generator
        self.on_finish = on_finish
        self.rows: list[Seq] = []
        self.admissions: list[int] = []  # requests admitted at the same step, per step
        self.steps = 0  # decode steps run
        self.key: tuple[int, int] | None = None
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.prefill_tokens = 0
        self.reused_tokens = 0
        self.images_encoded = 0
        # Counts for HFEngine.admissible (read from other threads, so each is written only here
        # and only grows): requests taken from pending to admit, those whose admission ended
        # (prefilled or refused), and running rows put back to pending on new weights.
        self.taken = 0
        self.admitted = 0
        self.requeued = 0
        # (start, end) in time.time() of every round, from taking policy.lock (bench-loop)
        self.busy_intervals: deque[tuple[float, float]] = deque(maxlen=1_000_000)

    def weights_key(self) -> tuple[int, int]:
        """(Policy.version, sum of the parameters' in-place version counters): an optimizer step,
        a weight refresh or a checkpoint load changes it."""
        return self.policy.version, sum(p._version for p in self.policy.model.parameters())

    def round(
        self,
        pending: deque[Seq],
        drain: Callable[[], None],
        fence: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> None:
        """Admit and decode until nothing runs or hold_seconds pass, under policy.lock; drain()
        moves newly queued requests into pending between steps. fence(): a context held inside
        the lock (GpuShare.generation_round: the round's stream drained before the lock goes)."""
        policy = self.policy
        start = time.perf_counter()
        with policy.lock, fence(), torch.no_grad(), policy.autocast(), engine_mode(policy.model):
            acquired = time.time()
            policy.model.eval()
            key = self.weights_key()
            if key != self.key:
                self.store.clear()
                for seq in reversed(self.rows):  # restart on the new weights, in order
                    seq.rec.restarts += 1
                    pending.appendleft(seq)
                    self.requeued += 1
                self.rows.clear()
                self.runner.release()
                self.key = key
                if self.runner.graphs is not None:
                    self.runner.graphs.refresh_weights()
            while True:
                drain()
                joining: list[Seq] = []
                try:
                    while pending and len(self.rows) + len(joining) < self.max_batch_size:
                        joining.append(pending.popleft())
                        self.taken += 1
                    if joining:
                        self._admit(joining)
                        self.admissions.append(len(joining))
                finally:
                    self.admitted += len(joining)
                if not self.rows or time.perf_counter() - start > self.hold_seconds:
                    break
                self._decode_step()
            if not self.rows and self.runner.graphs is None:
                self.runner.release()  # the learner may need the memory before the next request
            self.busy_intervals.append((acquired, time.time()))

    def idle(self, forget: bool = False) -> None:
        """Called after a second without requests: free KV of older weights (all stored KV when
        forget), and the decode buffer that CUDA graphs keep between rounds, so the learner gets
        the memory."""
        if self.store.entries and (forget or self.weights_key() != self.key):
            self.store.clear()
        if not self.rows and self.kv.k is not None:
            self.runner.release(graphs_too=True)

    def fail_running(self) -> list[Seq]:
        """Take every running sequence out (after an error that may have left the KV torn)."""
        failed, self.rows = self.rows, []
        self.runner.release()
        return failed

    # -- admission: prefix lookup, then prefill of the rest -------------------------------------

    def _admit(self, seqs: list[Seq]) -> None:
        """Prefill the requests that join at this step, together where their tokens fit
        PREFILL_BATCH_TOKENS, and add them to the running rows."""
        plans: list[Plan] = []
        for seq in seqs:
            req = seq.req
            seq.ids, seq.gen, seq.logprobs = list(req.prompt_ids), [], []
            seq.rec.join_step, seq.rec.running_at_join = self.steps, len(self.rows) + len(plans)
            t0 = time.perf_counter()
            try:
                plans.append(self._plan(seq))
            except Exception as exc:  # one bad request must not stop the others
                self._refuse(seq, exc)
            finally:
                self.prefill_seconds += time.perf_counter() - t0
        chunk: list[Plan] = []
        for plan in plans:
            if chunk and self._tokens([*chunk, plan]) > PREFILL_BATCH_TOKENS:
                self._prefill(chunk)
                chunk = []
            chunk.append(plan)
        if chunk:
            self._prefill(chunk)

    def _tokens(self, plans: list[Plan]) -> int:
        """Tokens one forward of these plans runs: packed, their sum; padded, rows x longest."""
        news = [p.new_tokens for p in plans]
        return sum(news) if self.runner.packed else max(news) * len(news)

    def _refuse(self, seq: Seq, exc: Exception) -> None:
        if not isinstance(exc, EngineError):
            log.exception("hf engine prefill failed")
            exc = EngineError(str(exc))
        seq.rec.finish_reason = "error"
        seq.req.resolve(exc)

    def _prefill(self, plans: list[Plan]) -> None:
        """Prefill plans in one forward, then add them as rows; a failed batch is retried one
        request at a time, so only the request at fault fails."""
        t0 = time.perf_counter()
        try:
            logits = self.runner.prefill(plans, self.rows)
            samplings = [p.seq.req.sampling for p in plans]
            firsts = sample_rows(
                logits,
                [s.temperature for s in samplings],
                [s.top_p for s in samplings],
                self.policy.banned_ids,
                self.generator,
                [_key(p.seq) for p in plans],
            )
        except Exception as exc:
            self.prefill_seconds += time.perf_counter() - t0
            if len(plans) == 1:
                self._refuse(plans[0].seq, exc)
                return
            log.warning("prefill of %d requests failed (%s); one at a time", len(plans), exc)
            for plan in plans:
                self._prefill([plan])
            return
        self.prefill_seconds += time.perf_counter() - t0
        row0 = len(self.rows)
        for p in plans:
            seq, rec = p.seq, p.seq.rec
            seq.cached = len(p.ids)
            rec.reused_tokens, rec.prefilled_tokens = p.m, p.new_tokens
            rec.images_encoded, rec.prefill_batch = p.new_images, len(plans)
            self.reused_tokens += p.m
            self.prefill_tokens += p.new_tokens
            self.images_encoded += p.new_images
            self.rows.append(seq)
        done = []
        for r, (plan, tok, lp) in enumerate(zip(plans, *firsts, strict=True)):
            gen = self._take(plan.seq, tok, lp)
            if gen is not None:  # done at its first id
                done.append((row0 + r, plan.seq, gen))
        for row, seq, gen in reversed(done):  # descending rows, as in _decode_step
            self._leave(row)
            self.on_finish(seq, gen)

    def _plan(self, seq: Seq) -> Plan:
        """Checks, the prefix lookup and the positions: the host's part of a prefill."""
        policy = self.policy
        req = seq.req
        if req.sampling.max_new_tokens < 1:
            raise EngineError(f"max_new_tokens must be >= 1, got {req.sampling.max_new_tokens}")
        pad = policy.image_pad_id
        ids = torch.tensor(seq.ids, dtype=torch.long)
        runs = pad_runs(ids, pad)
        if len(runs) != len(req.images):
            raise EngineError(
                f"prompt holds {int((ids == pad).sum())} image pads in {len(runs)} runs but "
                f"{len(req.images)} images were given"
            )
        if not seq.digests:
            seq.digests = req.digests or [self.screenshots.digest(im) for im in req.images]
        entry, m, reused_images = self.store.best(self.key or (0, 0), ids, runs, seq.digests)
        pixel_values, new_grids = self.screenshots.pixels(req, reused_images)
        old_grids = (
            entry.grids[:reused_images] if entry is not None and entry.grids is not None else None
        )
        grids = [g for g in (old_grids, new_grids) if g is not None and len(g)]
        seq.grids = torch.cat(grids) if grids else None
        need = [] if seq.grids is None else (seq.grids.prod(-1) // policy.merge_size**2).tolist()
        if [e - s for s, e in runs] != need:
            raise EngineError(
                f"prompt holds {int((ids == pad).sum())} image pads but the images need {sum(need)}"
            )
        positions = self.runner.positions(ids, seq)
        new_images = len(req.images) - reused_images
        return Plan(seq, ids, m, entry, positions, pixel_values, new_grids, new_images)

    # -- decoding ------------------------------------------------------------------------------

    def _decode_step(self) -> None:
        t0 = time.perf_counter()
        rows = self.rows
        logits = self.runner.decode(rows)
        ids, lps = sample_rows(
            logits,
            [s.req.sampling.temperature for s in rows],
            [s.req.sampling.top_p for s in rows],
            self.policy.banned_ids,
            self.generator,
            [_key(s) for s in rows],
        )
        self.steps += 1
        self.decode_seconds += time.perf_counter() - t0
        finished = []
        for i, (seq, tok, lp) in enumerate(zip(rows, ids, lps, strict=True)):
            seq.cached += 1
            gen = self._take(seq, tok, lp)
            if gen is not None:
                finished.append((i, seq, gen))
        for i, seq, gen in reversed(finished):  # descending rows: moves never touch a finished one
            self._leave(i)
            self.on_finish(seq, gen)  # after _leave: its KV is stored before its caller goes on

    def _take(self, seq: Seq, tok: int, lp: float) -> Generation | None:
        """Append a sampled id; the Generation when it ends the sequence (a stop id or
        max_new_tokens)."""
        seq.ids.append(tok)
        seq.gen.append(tok)
        seq.logprobs.append(lp)
        s = seq.req.sampling
        reason: Any = (
            "stop"
            if tok in s.stop_token_ids
            else "length"
            if len(seq.gen) >= s.max_new_tokens
            else ""
        )
        if not reason:
            return None
        seq.rec.finish_reason, seq.rec.finish_step = reason, self.steps
        version = self.key[0] if self.key is not None else self.policy.version
        seq.rec.new_tokens, seq.rec.policy_version = len(seq.gen), version
        return Generation(list(seq.gen), list(seq.logprobs), reason, version)

    # -- leaving -------------------------------------------------------------------------------

    def _leave(self, row: int) -> None:
        """Keep the row's KV in the prefix store, then give its slot to the last row."""
        seq = self.rows[row]
        k, v = self.kv.tensors()
        n = seq.cached
        if self.store.max_sequences > 0 and self.key is not None:
            self.store.add(
                PrefixEntry(
                    self.key,
                    torch.tensor(seq.ids[:n], dtype=torch.long),
                    list(seq.digests),
                    seq.grids,
                    k[:, row, :, :n].clone(),
                    v[:, row, :, :n].clone(),
                )
            )
        last = len(self.rows) - 1
        if row != last:
            self.kv.move(last, row, self.rows[last].cached)
            self.rows[row] = self.rows[last]
        self.rows.pop()


def _key(seq: Seq) -> int | None:
    """The draw key of the token `seq` samples next: its seed's and its index among the sampled."""
    seed = seq.req.sampling.seed
    return None if seed is None else key_of(seed, len(seq.gen))
