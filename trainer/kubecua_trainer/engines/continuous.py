"""Continuous batching with KV reuse across turns, for the embedded hf engine (engines/hf.py).

A worker thread keeps a batch of decoding sequences. Each decode step runs one forward of every
running sequence; a request that arrives meanwhile is prefilled and joins at the next step, and a
finished sequence leaves at once. When a sequence finishes, the KV of its prompt and reply is
kept (PrefixStore, an LRU bounded in bytes and sequences); the next request whose prompt extends
it (same tokens, same screenshots) prefills only the new tokens: turn k of an episode costs one
screenshot and one user turn, not the whole history. A broken prefix (perTurn mode dropping an
old screenshot) reuses the KV up to the first difference, or nothing.

What transformers 5.17 ships, and why it is not used here (checked in its sources):
- `generate_batch` / `ContinuousBatchingManager` (generation/continuous_batching/) with paged
  attention: requests carry token ids only (RequestState.initial_tokens), positions are 1-D
  (`position_ids.extend(range(...))` in input_outputs.py) and no pixel_values reach the model, so
  it cannot run Qwen-VL with screenshots (image features, 3-D M-RoPE positions).
- `StaticCache`: one fixed length for the whole batch and no per-row lengths; rows joining and
  leaving at different lengths need per-row lengths.
- `generate(past_key_values=...)`: one static batch, and Qwen2_5_VLModel keeps a single
  `rope_deltas` on the module (compute_3d_position_ids), which is wrong as soon as rows of
  different episodes share a decode step.
So this module runs its own loop on the model's forward: explicit 3-D positions from the model's
own get_rope_index (per sequence, kept as a per-row delta for decoding), a KV buffer of shape
(layers, rows, kv heads, length, head dim) written at each row's own length, and a padding mask.
Decode attention groups the query heads by KV head (exact GQA with one SDPA call and no copy of
the cache); prefill goes to transformers' SDPA function.

Exactness: behaviour log-probs are log softmax(logits / T) of the sampled id over the vocabulary
minus the banned ids, before top-p (engines/base.py), as in the static path. KV is stored in the
compute dtype: under bf16 autocast SDPA casts K and V to bf16 anyway, so storing them in bf16 is
bit-identical. Weights: the cache is keyed by Policy.version and a fingerprint of the parameters'
in-place version counters; any change (a learner step, a weight refresh, a checkpoint load)
drops every stored KV, and sequences in flight restart from their prompt, so no generation mixes
two versions of the weights.
CUDA graphs (HFEngine(cuda_graphs=True); the trainer turns them on wherever the policy is on
CUDA): the decode step is replayed from graphs, one per power-of-two row count and KV buffer, with
a bf16 copy of the text model's fp32 Linear weights (_DecodeGraphs says why).
Requests that join at the same step are prefilled in one forward (right-padded, each row causal
over its own reused prefix): a small prefill costs the host's kernel launches, not the GPU's work.
What it leaves out: torch.compile of the decode step, chunked prefill, and sharing one prefix
between rows without a copy (each row holds its own KV).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from kubecua_trainer.engines.base import EngineError, Generation

if TYPE_CHECKING:
    from kubecua_trainer.engines.hf import _Request
    from kubecua_trainer.model import Policy

log = logging.getLogger(__name__)

# Requests admitted together are prefilled in one forward of at most this many (padded) tokens:
# a small prefill is bound by the host launching ~3,400 kernels (about 100 ms for a 3B model on
# an H100, docs/benchmarks.md), so one forward for eight requests costs about what one did.
PREFILL_BATCH_TOKENS = 16_384
ATTENTION = "kubecua_engine_sdpa"  # no "flash" in the name: transformers would take its FA path


def _engine_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Decode (one query token): (B, H, 1, D) queries regrouped as (B, H_kv, H / H_kv, D), so one
    SDPA call with the padding mask serves GQA without repeating K and V (transformers' SDPA path
    repeats them whenever a mask is given). Prefill: transformers' SDPA function."""
    if query.shape[2] != 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    b, h, _, d = query.shape
    q = query.reshape(b, key.shape[1], h // key.shape[1], d)  # head i uses KV head i // groups
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=attention_mask, scale=scaling
    )
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, _engine_attention)


@contextlib.contextmanager
def engine_attention(model: torch.nn.Module) -> Iterator[None]:
    """Route the text attention through _engine_attention meanwhile (held under policy.lock, so
    the learner never sees it); the vision tower keeps its own implementation."""
    configs: dict[int, Any] = {
        id(m.config): m.config
        for m in model.modules()
        if hasattr(m, "layer_idx") and hasattr(m, "k_proj") and hasattr(m, "config")
    }
    before = {k: c._attn_implementation for k, c in configs.items()}
    for c in configs.values():
        c._attn_implementation = ATTENTION
    try:
        yield
    finally:
        for k, c in configs.items():
            c._attn_implementation = before[k]


@dataclass
class EngineRecord:
    """One request's path through the engine, for tests and metrics. Steps count decode steps."""

    request: int  # arrival order
    prompt_tokens: int
    reused_tokens: int = 0  # prompt tokens whose KV came from the prefix store
    prefilled_tokens: int = 0  # prompt tokens run through the model
    images_encoded: int = 0  # screenshots run through the vision tower
    new_tokens: int = 0
    join_step: int = -1  # decode steps run before it joined the batch
    finish_step: int = -1  # decode steps run when it left
    running_at_join: int = 0  # sequences already decoding when it joined
    finish_reason: str = ""
    policy_version: int = 0
    restarts: int = 0  # times the weights changed under it
    prefill_batch: int = 0  # requests prefilled in the same forward as this one


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def image_digest(image: Image.Image) -> bytes:
    """Content digest of a screenshot: equal pixels, equal digest, whatever object holds them."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{image.mode}:{image.size}".encode())
    h.update(image.tobytes())
    return h.digest()


def pad_runs(ids: torch.Tensor, pad_id: int) -> list[tuple[int, int]]:
    """[start, end) of each run of image pads.

    Example: pad 9, ids [1, 9, 9, 2, 9] -> [(1, 3), (4, 5)].
    """
    is_pad = torch.cat([torch.tensor([False]), ids == pad_id, torch.tensor([False])]).int()
    edges = (is_pad[1:] - is_pad[:-1]).nonzero()[:, 0].tolist()
    return list(zip(edges[0::2], edges[1::2], strict=True))


@dataclass(eq=False)
class PrefixEntry:
    key: tuple[int, int]  # weights key (engine.weights_key)
    tokens: torch.Tensor  # (L,) ids whose K/V are held
    digests: list[bytes]  # of the screenshots inside those tokens, in order
    grids: torch.Tensor | None  # (images, 3) their image_grid_thw
    k: torch.Tensor  # (layers, kv heads, L, head dim)
    v: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class PrefixStore:
    """LRU of finished sequences' KV, bounded in bytes and in sequences."""

    def __init__(self, max_bytes: int, max_sequences: int):
        self.max_bytes, self.max_sequences = max_bytes, max_sequences
        self.entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self.bytes = 0
        self._next = 0

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def best(
        self, key: tuple[int, int], ids: torch.Tensor, runs: list[tuple[int, int]],
        digests: list[bytes],
    ) -> tuple[PrefixEntry | None, int, int]:  # fmt: skip
        """(entry, reusable tokens, reusable images) of the longest valid shared prefix. At least
        one prompt token is always left to prefill (it gives the first logits); a prefix never
        ends inside a screenshot, and every screenshot in it must have the same pixels."""
        best: tuple[PrefixEntry | None, int, int] = (None, 0, 0)
        used = None
        for handle, e in self.entries.items():
            if e.key != key:
                continue
            n = min(len(e.tokens), len(ids) - 1)
            diff = (e.tokens[:n] != ids[:n]).nonzero()
            m = int(diff[0, 0]) if len(diff) else n
            images = 0
            for j, (start, end) in enumerate(runs):
                if end > m or j >= len(e.digests) or e.digests[j] != digests[j]:
                    m = min(m, start)  # cut before a screenshot that is partial or different
                    break
                images = j + 1
            if m > best[1]:
                best, used = (e, m, images), handle
        if used is not None:
            self.entries.move_to_end(used)
        return best

    def add(self, entry: PrefixEntry) -> None:
        """Store it, dropping entries it extends (their KV is a prefix of its KV), then the least
        recently used ones beyond the bounds."""
        if entry.nbytes > self.max_bytes or self.max_sequences <= 0:
            return
        for handle, e in list(self.entries.items()):
            n = len(e.tokens)
            if (
                e.key == entry.key
                and n <= len(entry.tokens)
                and e.digests == entry.digests[: len(e.digests)]
                and bool((entry.tokens[:n] == e.tokens).all())
            ):
                self._drop(handle)
        self.entries[self._next] = entry
        self._next += 1
        self.bytes += entry.nbytes
        while self.entries and (
            self.bytes > self.max_bytes or len(self.entries) > self.max_sequences
        ):
            self._drop(next(iter(self.entries)))

    def _drop(self, handle: int) -> None:
        self.bytes -= self.entries.pop(handle).nbytes


class KVRows:
    """K and V of the running rows, (layers, rows, kv heads, capacity, head dim); row i at [0, n_i).

    Capacity grows by reallocation (rare: a request reserves its prompt plus max_new_tokens when it
    joins); rows are kept dense, a leaving row's slot takes the last row.
    """

    def __init__(self, layers: int, heads: int, dim: int, dtype: torch.dtype, device: torch.device):
        self.shape = (layers, heads, dim)
        self.dtype, self.device = dtype, device
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.allocations = 0  # bumped by every (re)allocation and release: graphs check it

    def reserve(self, rows: int, length: int, used: list[int], max_rows: int) -> None:
        cap_rows = 0 if self.k is None else self.k.shape[1]
        cap_len = 0 if self.k is None else self.k.shape[3]
        if rows <= cap_rows and length <= cap_len:
            return
        new_rows = max(cap_rows, min(max_rows, 1 << (rows - 1).bit_length()), rows)
        # A quarter of headroom: fewer reallocations (and CUDA graph recaptures) as turns grow.
        new_len = max(_round_up(max(length, 1), 256), _round_up(cap_len * 5 // 4, 256))
        layers, heads, dim = self.shape
        shape = (layers, new_rows, heads, new_len, dim)
        # Zeros, not empty: masked-out slots still enter the attention's matmuls, and stale
        # memory may hold NaN bit patterns (0 * NaN is NaN).
        k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if self.k is not None and self.v is not None:
            for r, n in enumerate(used):
                k[:, r, :, :n] = self.k[:, r, :, :n]
                v[:, r, :, :n] = self.v[:, r, :, :n]
        self.k, self.v = k, v
        self.allocations += 1

    def release(self) -> None:
        self.k = self.v = None
        self.allocations += 1

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None or self.v is None:
            raise RuntimeError("KV rows used before reserve()")
        return self.k, self.v

    def move(self, src: int, dst: int, length: int) -> None:
        k, v = self.tensors()
        k[:, dst, :, :length] = k[:, src, :, :length]
        v[:, dst, :, :length] = v[:, src, :, :length]

    def nbytes(self) -> int:
        return 0 if self.k is None or self.v is None else self.k.nbytes + self.v.nbytes


class _PrefillCache:
    """past_key_values for one row's prefill: new K/V go to [start, start + n) of the row;
    attention sees [0, width) (width >= start + n: the mask hides the rest)."""

    is_compileable = False

    def __init__(self, kv: KVRows, row: int, start: int, width: int):
        self.kv, self.row, self.start, self.width = kv, row, start, width

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        end = self.start + key_states.shape[2]
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx, self.row], vs[layer_idx, self.row]
        k[:, self.start : end] = key_states[0]
        v[:, self.start : end] = value_states[0]
        width = max(end, self.width)
        return k[None, :, :width], v[None, :, :width]


class _BatchPrefillCache:
    """past_key_values for a batched prefill of rows [row0, row0 + R): row r's N (right-padded)
    new K/V go to [starts[r], starts[r] + N) of its row; attention sees [0, width) of every row,
    masked per row. The padding's K/V land past the row's length, where the decode mask hides
    them until a decode step overwrites them."""

    is_compileable = False

    def __init__(self, kv: KVRows, row0: int, starts: torch.Tensor, n: int, width: int):
        self.kv, self.row0, self.width = kv, row0, width
        self.min_start = int(starts.min())
        r = len(starts)
        self.rows = (row0 + torch.arange(r, device=starts.device))[:, None].expand(r, n)
        self.slots = starts[:, None] + torch.arange(n, device=starts.device)[None, :]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.min_start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx], vs[layer_idx]
        # (R, heads, N, dim) -> (R, N, heads, dim): advanced indices (rows, slots) come first
        k[self.rows, :, self.slots] = key_states.transpose(1, 2).to(k.dtype)
        v[self.rows, :, self.slots] = value_states.transpose(1, 2).to(v.dtype)
        end = self.row0 + len(self.rows)
        return k[self.row0 : end, :, : self.width], v[self.row0 : end, :, : self.width]


class _DecodeCache:
    """past_key_values for a decode step: row i's new K/V go to index lens[i]; attention sees
    [0, width) of every row, masked to each row's own length."""

    is_compileable = False

    def __init__(self, kv: KVRows, lens: torch.Tensor, width: int):
        self.kv, self.lens, self.width = kv, lens, width
        self.rows = torch.arange(len(lens), device=lens.device)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.width - 1

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ks, vs = self.kv.tensors()
        k, v = ks[layer_idx], vs[layer_idx]
        k[self.rows, :, self.lens] = key_states[:, :, 0].to(k.dtype)
        v[self.rows, :, self.lens] = value_states[:, :, 0].to(v.dtype)
        n = len(self.lens)
        return k[:n, :, : self.width], v[:n, :, : self.width]


def sample_rows(
    logits: torch.Tensor,
    temperatures: list[float],
    top_ps: list[float],
    banned: list[int],
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[float]]:
    """Sample one id per row; return the ids and log softmax(logits / T) of each (before top-p).

    T <= 0 is greedy (argmax, log-probs at T = 1). Example: logits [[2, 0, 0]] at T = 1 can give
    id 1 with log-prob 0 - log(e^2 + 2) = -2.2395.
    """
    scores = logits.float()
    temps = torch.tensor([t if t > 0 else 1.0 for t in temperatures], device=scores.device)
    scaled = scores / temps[:, None]
    scaled[:, banned] = float("-inf")
    logp = torch.log_softmax(scaled, dim=-1)
    masked = scaled
    if any(p < 1.0 for p in top_ps):  # rows at 1.0 keep every id (inf: no rounding cut)
        top_p = torch.tensor([p if p < 1.0 else float("inf") for p in top_ps], device=scores.device)
        top_p = top_p[:, None]
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        probs = sorted_lp.exp()
        drop = probs.cumsum(-1) - probs >= top_p
        masked = scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    greedy = [t <= 0 for t in temperatures]
    if all(greedy):
        ids = scaled.argmax(dim=-1)
    else:
        ids = torch.multinomial(torch.softmax(masked, dim=-1), 1, generator=generator)[:, 0]
        if any(greedy):
            rows = torch.tensor(greedy, device=scores.device)
            ids = torch.where(rows, scaled.argmax(dim=-1), ids)
    lps = logp.gather(-1, ids[:, None])[:, 0]
    return ids.tolist(), lps.tolist()


@dataclass(eq=False)
class _Seq:
    req: _Request
    rec: EngineRecord
    digests: list[bytes]
    ids: list[int] = field(default_factory=list)  # prompt, then sampled ids
    grids: torch.Tensor | None = None
    delta: int = 0  # M-RoPE position of token i is i + delta after the last screenshot
    cached: int = 0  # leading ids whose K/V are in the row
    gen: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


@dataclass(eq=False)
class _Plan:
    """A request ready to prefill: its ids, the reused prefix (m ids from entry), its 3-D
    positions and the pixels of the screenshots it adds."""

    seq: _Seq
    ids: torch.Tensor
    m: int
    entry: PrefixEntry | None
    positions: torch.Tensor
    pixel_values: torch.Tensor | None
    new_grids: torch.Tensor | None
    new_images: int


class ContinuousBatcher:
    """The worker's state: running rows, their KV, the prefix store. Every method runs in the
    engine's worker thread; `round` is called with pending requests and holds policy.lock."""

    def __init__(
        self,
        policy: Policy,
        max_batch_size: int,
        cache_bytes: int,
        cache_sequences: int,
        hold_seconds: float,
        generator: torch.Generator | None,
        on_finish: Callable[[_Seq, Generation], None],
        cuda_graphs: bool = False,
    ):
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.hold_seconds = hold_seconds
        self.generator = generator
        self.on_finish = on_finish
        self.store = PrefixStore(cache_bytes, cache_sequences)
        cfg: Any = policy.model.config
        text = cfg.get_text_config()
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.kv = KVRows(
            text.num_hidden_layers, text.num_key_value_heads, head_dim, policy.dtype, policy.device
        )
        self.rows: list[_Seq] = []
        self.admissions: list[int] = []  # requests admitted at the same step, per step
        self.steps = 0  # decode steps run
        self.key: tuple[int, int] | None = None
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.prefill_tokens = 0
        self.reused_tokens = 0
        # (start, end) in time.time() of every round, from taking policy.lock (bench-loop)
        self.busy_intervals: deque[tuple[float, float]] = deque(maxlen=1_000_000)
        self.graphs = _DecodeGraphs(self) if cuda_graphs and policy.device.type == "cuda" else None
        # Digests by image object: an episode hands the same screenshots back every turn.
        self._digests: dict[int, tuple[weakref.ref[Image.Image], bytes]] = {}
        self._digest_lock = threading.Lock()

    def _digest(self, image: Image.Image) -> bytes:
        with self._digest_lock:  # prepare() runs in callers' threads
            held = self._digests.get(id(image))
            if held is not None and held[0]() is image:
                return held[1]
        digest = image_digest(image)
        with self._digest_lock:
            if len(self._digests) > 4096:  # forget screenshots that no longer exist
                self._digests = {k: v for k, v in self._digests.items() if v[0]() is not None}
            self._digests[id(image)] = (weakref.ref(image), digest)
        return digest

    def prepare(self, req: _Request) -> None:
        """CPU work of a request, run in the caller's thread before it is queued: the digests of
        its screenshots and the processor's pixel values of its newest one (the screenshot a turn
        adds; older ones are normally in a stored prefix). Per-image processing gives the same
        pixel values as processing the images together, which _prefill does for any other."""
        req.digests = [self._digest(im) for im in req.images]
        last = len(req.images) - 1
        proc = self.policy.processor.image_processor(images=[req.images[last]], return_tensors="pt")
        req.prepared[last] = (proc["pixel_values"], proc["image_grid_thw"])

    def _pixels(self, req: _Request, first: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(pixel_values, image_grid_thw) of req.images[first:], from prepare where it ran."""
        todo = [i for i in range(first, len(req.images)) if i not in req.prepared]
        if todo:
            proc = self.policy.processor.image_processor(
                images=[req.images[i] for i in todo], return_tensors="pt"
            )
            sizes = proc["image_grid_thw"].prod(-1).tolist()
            for i, pv, grid in zip(
                todo, proc["pixel_values"].split(sizes), proc["image_grid_thw"], strict=True
            ):
                req.prepared[i] = (pv, grid[None])
        parts = [req.prepared[i] for i in range(first, len(req.images))]
        if not parts:
            return None, None
        return torch.cat([p for p, _ in parts]), torch.cat([g for _, g in parts])

    def weights_key(self) -> tuple[int, int]:
        """(Policy.version, sum of the parameters' in-place version counters): an optimizer step,
        a weight refresh or a checkpoint load changes it."""
        return self.policy.version, sum(p._version for p in self.policy.model.parameters())

    def round(self, pending: deque[_Seq], drain: Callable[[], None]) -> None:
        """Admit and decode until nothing runs or hold_seconds pass, under policy.lock; drain()
        moves newly queued requests into pending between steps."""
        policy = self.policy
        start = time.perf_counter()
        with policy.lock, torch.no_grad(), policy.autocast(), engine_attention(policy.model):
            acquired = time.time()
            policy.model.eval()
            key = self.weights_key()
            if key != self.key:
                self.store.clear()
                for seq in reversed(self.rows):  # restart on the new weights, in order
                    seq.rec.restarts += 1
                    pending.appendleft(seq)
                self.rows.clear()
                self.kv.release()
                self.key = key
                if self.graphs is not None:
                    self.graphs.refresh_weights()
            while True:
                drain()
                joining: list[_Seq] = []
                while pending and len(self.rows) + len(joining) < self.max_batch_size:
                    joining.append(pending.popleft())
                if joining:
                    self._admit(joining)
                    self.admissions.append(len(joining))
                if not self.rows or time.perf_counter() - start > self.hold_seconds:
                    break
                self._decode_step()
            if not self.rows and self.graphs is None:
                self.kv.release()  # the learner may need the memory before the next request
            self.busy_intervals.append((acquired, time.time()))

    def idle(self, forget: bool = False) -> None:
        """Called after a second without requests: free KV of older weights (all stored KV when
        forget), and the decode buffer that CUDA graphs keep between rounds, so the learner gets
        the memory."""
        if self.store.entries and (forget or self.weights_key() != self.key):
            self.store.clear()
        if not self.rows and self.kv.k is not None:
            self.kv.release()
            if self.graphs is not None:
                self.graphs.clear()

    def fail_running(self) -> list[_Seq]:
        """Take every running sequence out (after an error that may have left the KV torn)."""
        failed, self.rows = self.rows, []
        self.kv.release()
        return failed

    # -- admission: prefix lookup, then prefill of the rest -------------------------------------

    def _admit(self, seqs: list[_Seq]) -> None:
        """Prefill the requests that join at this step, together where their padded tokens fit
        PREFILL_BATCH_TOKENS, and add them to the running rows."""
        plans: list[_Plan] = []
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
        chunk: list[_Plan] = []
        for plan in plans:
            width = max(len(p.ids) - p.m for p in [*chunk, plan])
            if chunk and width * (len(chunk) + 1) > PREFILL_BATCH_TOKENS:
                self._prefill(chunk)
                chunk = []
            chunk.append(plan)
        if chunk:
            self._prefill(chunk)

    def _refuse(self, seq: _Seq, exc: Exception) -> None:
        if not isinstance(exc, EngineError):
            log.exception("hf engine prefill failed")
            exc = EngineError(str(exc))
        seq.rec.finish_reason = "error"
        seq.req.resolve(exc)

    def _prefill(self, plans: list[_Plan]) -> None:
        """Prefill plans in one forward, then add them as rows; a failed batch is retried one
        request at a time, so only the request at fault fails."""
        t0 = time.perf_counter()
        try:
            firsts = self._forward(plans)
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
        for plan in plans:
            self.rows.append(plan.seq)
        done = []
        for r, (plan, first) in enumerate(zip(plans, firsts, strict=True)):
            gen = self._take(plan.seq, *first)
            if gen is not None:  # done at its first id
                done.append((row0 + r, plan.seq, gen))
        for row, seq, gen in reversed(done):  # descending rows, as in _decode_step
            self._leave(row)
            self.on_finish(seq, gen)

    def _plan(self, seq: _Seq) -> _Plan:
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
            seq.digests = req.digests or [self._digest(im) for im in req.images]
        entry, m, reused_images = self.store.best(self.key or (0, 0), ids, runs, seq.digests)
        pixel_values, new_grids = self._pixels(req, reused_images)
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
        positions = self._positions(ids, seq)
        new_images = len(req.images) - reused_images
        return _Plan(seq, ids, m, entry, positions, pixel_values, new_grids, new_images)

    def _forward(self, plans: list[_Plan]) -> list[tuple[int, float]]:
        """One forward of the plans' new tokens into rows [len(rows), len(rows) + R); the first
        sampled (id, log-prob) of each."""
        policy = self.policy
        dev, pad = policy.device, policy.image_pad_id
        row0, r = len(self.rows), len(plans)
        ns = [len(p.ids) - p.m for p in plans]
        n = max(ns)
        total = max(max(len(p.ids) + p.seq.req.sampling.max_new_tokens, p.m + n) for p in plans)
        self.kv.reserve(row0 + r, total, [s.cached for s in self.rows], self.max_batch_size)
        k, v = self.kv.tensors()
        for i, p in enumerate(plans):
            if p.entry is not None and p.m:
                k[:, row0 + i, :, : p.m] = p.entry.k[:, :, : p.m]
                v[:, row0 + i, :, : p.m] = p.entry.v[:, :, : p.m]
        inputs: dict[str, Any]
        if r == 1:  # one request: SDPA's own causal path when nothing is reused
            (p,) = plans
            mask, width = None, n
            if p.m:  # causal over the suffix, full over the reused prefix; width aligned for SDPA
                width = min(_round_up(p.m + n, 64), k.shape[3])
                q = torch.arange(n, device=dev)[:, None] + p.m
                mask = (torch.arange(width, device=dev)[None, :] <= q)[None, None]
            ids = p.ids[None, p.m :]
            positions = p.positions[:, None, p.m :]
            cache: Any = _PrefillCache(self.kv, row0, p.m, width)
            keep: int | torch.Tensor = 1
        else:  # right-padded rows, each causal over its own prefix and new tokens
            starts = torch.tensor([p.m for p in plans], device=dev)
            width = min(_round_up(int(starts.max()) + n, 64), k.shape[3])
            q = starts[:, None, None] + torch.arange(n, device=dev)[None, :, None]
            mask = (torch.arange(width, device=dev)[None, None, :] <= q)[:, None]
            ids = torch.zeros((r, n), dtype=torch.long)  # id 0 pads: never an image pad
            positions = torch.zeros((3, r, n), dtype=torch.long)
            for i, (p, ni) in enumerate(zip(plans, ns, strict=True)):
                ids[i, :ni] = p.ids[p.m :]
                positions[:, i, :ni] = p.positions[:, p.m :]
                # the padding continues the row's positions (its outputs are never read)
                positions[:, i, ni:] = p.positions[:, -1:] + torch.arange(1, n - ni + 1)
            cache = _BatchPrefillCache(self.kv, row0, starts, n, width)
            keep = torch.tensor(sorted(set(ni - 1 for ni in ns)), device=dev)
        inputs = {
            "input_ids": ids.to(dev),
            "position_ids": positions.to(dev),
            "mm_token_type_ids": (ids == pad).long().to(dev),
            "attention_mask": mask,
        }
        pixels = [p.pixel_values for p in plans if p.pixel_values is not None]
        if pixels:
            inputs["pixel_values"] = torch.cat(pixels).to(dev)
            grids = [p.new_grids for p in plans if p.new_grids is not None]
            inputs["image_grid_thw"] = torch.cat(grids).to(dev)
        out = policy.model(**inputs, past_key_values=cache, use_cache=True, logits_to_keep=keep)
        if r == 1:
            last = out.logits[:, -1]
        else:  # row i's logits at its own last new token
            at = {int(j): c for c, j in enumerate(keep.tolist())}  # type: ignore[union-attr]
            cols = torch.tensor([at[ni - 1] for ni in ns], device=dev)
            last = out.logits[torch.arange(r, device=dev), cols]
        for p, ni in zip(plans, ns, strict=True):
            seq, rec = p.seq, p.seq.rec
            seq.cached = len(p.ids)
            rec.reused_tokens, rec.prefilled_tokens = p.m, ni
            rec.images_encoded, rec.prefill_batch = p.new_images, r
            self.reused_tokens += p.m
            self.prefill_tokens += ni
        samplings = [p.seq.req.sampling for p in plans]
        ids_, lps = sample_rows(
            last,
            [s.temperature for s in samplings],
            [s.top_p for s in samplings],
            policy.banned_ids,
            self.generator,
        )
        return list(zip(ids_, lps, strict=True))

    def _positions(self, ids: torch.Tensor, seq: _Seq) -> torch.Tensor:
        """(3, L) M-RoPE positions from the model's own get_rope_index; sets seq.delta."""
        if seq.grids is None:
            seq.delta = 0
            return torch.arange(len(ids))[None].expand(3, -1)
        inner: Any = self.policy.model.model
        pos, delta = inner.get_rope_index(
            ids[None],
            mm_token_type_ids=(ids[None] == self.policy.image_pad_id).int(),
            image_grid_thw=seq.grids,
        )
        seq.delta = int(delta.reshape(-1)[0])
        return pos[:, 0].cpu()

    # -- decoding ------------------------------------------------------------------------------

    def _decode_step(self) -> None:
        t0 = time.perf_counter()
        dev = self.policy.device
        rows = self.rows
        lens_list = [s.cached for s in rows]
        lens = torch.tensor(lens_list, device=dev)
        width = min(_round_up(max(lens_list) + 1, 64), self.kv.tensors()[0].shape[3])
        logits = self.graphs.step(rows) if self.graphs is not None else None
        if logits is None:
            tokens = torch.tensor([[s.ids[-1]] for s in rows], device=dev)
            delta = torch.tensor([s.delta for s in rows], device=dev)
            logits = decode_forward(self.policy.model, self.kv, tokens, lens, delta, width)
        ids, lps = sample_rows(
            logits,
            [s.req.sampling.temperature for s in rows],
            [s.req.sampling.top_p for s in rows],
            self.policy.banned_ids,
            self.generator,
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

    def _take(self, seq: _Seq, tok: int, lp: float) -> Generation | None:
        """Append a sampled id; the Generation when it ends the sequence (a stop id or
        max_new_tokens)."""
        seq.ids.append(tok)
        seq.gen.append(tok)
        seq.logprobs.append(lp)
        s = seq.req.sampling
        reason = (
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
        return Generation(list(seq.gen), list(seq.logprobs), reason, version)  # type: ignore[arg-type]

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


def decode_forward(
    model: Any, kv: KVRows, tokens: torch.Tensor, lens: torch.Tensor, delta: torch.Tensor,
    width: int, params: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:  # fmt: skip
    """One decode step of every row: (rows, 1) ids at positions lens + delta -> (rows, vocab)
    logits. params: stand-in tensors for some parameters (torch.func.functional_call)."""
    mask = (torch.arange(width, device=lens.device)[None, :] <= lens[:, None])[:, None, None, :]
    kwargs = {
        "input_ids": tokens,
        "position_ids": (lens + delta)[None, :, None].expand(3, -1, -1),
        "attention_mask": mask,
        "past_key_values": _DecodeCache(kv, lens, width),
        "use_cache": True,
    }
    if params is None:
        out = model(**kwargs)
    else:
        out = torch.func.functional_call(model, params, (), kwargs, tie_weights=False, strict=False)
    return out.logits[:, -1]


class _DecodeGraphs:
    """The decode step replayed from CUDA graphs (CUDA only): one graph per (row bucket,
    KV buffer), rows padded to a power of two, attention over the whole buffer (masked).

    Why a bf16 copy of the text model's Linear weights: under autocast the fp32 masters are cast
    to bf16 at every use, and a graph would replay those casts (for a 3B model about 18 GB of
    memory traffic a step). The copy holds exactly what autocast's cast gives (round to nearest),
    refreshed in place when the weights change, so results are unchanged. Capture runs with
    autocast's cast cache off, so no graph keeps a pointer into that cache. Any failure to capture
    turns graphs off for the engine's life and decoding goes on eagerly.
    """

    def __init__(self, batcher: ContinuousBatcher):
        self.b = batcher
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.static: dict[int, torch.Tensor] = {}  # rows -> (3, rows) ids, lens, deltas
        self.buffer: int | None = None  # KVRows.allocations of the buffer the graphs write into
        self.pool: Any = None
        self.params: dict[str, torch.Tensor] = {}
        self.broken = False
        self.captures = 0

    def refresh_weights(self) -> None:
        """(Re)fill the bf16 copies from the current weights, in place (graphs keep pointers)."""
        policy = self.b.policy
        if policy.dtype != torch.bfloat16:
            self.params = {}
            return
        for name, module in policy.model.named_modules():
            if not isinstance(module, torch.nn.Linear) or "visual" in name.split("."):
                continue
            for pname, p in module.named_parameters(recurse=False):
                if p.dtype != torch.float32:
                    continue
                full = f"{name}.{pname}" if name else pname
                held = self.params.get(full)
                if held is None or held.shape != p.shape:
                    self.params[full] = p.detach().to(torch.bfloat16)
                else:
                    held.copy_(p.detach())

    def clear(self) -> None:
        self.graphs.clear()
        self.static.clear()
        self.buffer = None
        # A private pool dies with the last graph that used it: a capture into its handle after
        # that trips the caching allocator's assertions (seen on an H100), so start a new one.
        self.pool = None

    def step(self, rows: list[_Seq]) -> torch.Tensor | None:
        """(len(rows), vocab) logits from a graph; None when graphs are off (decode eagerly)."""
        if self.broken:
            return None
        k, _ = self.b.kv.tensors()
        if self.buffer != self.b.kv.allocations:  # reallocated: the graphs wrote into the old one
            self.clear()
            self.buffer = self.b.kv.allocations
        n = len(rows)
        bucket = min(1 << (n - 1).bit_length(), k.shape[1])
        static = self.static.get(bucket)
        if static is None:
            static = self.static[bucket] = torch.zeros(
                (3, bucket), dtype=torch.long, device=k.device
            )
        pad = bucket - n  # padding rows: id 0 at position 0 of unused rows, attending to it
        host = torch.tensor(
            [
                [s.ids[-1] for s in rows] + [0] * pad,
                [s.cached for s in rows] + [0] * pad,
                [s.delta for s in rows] + [0] * pad,
            ]
        )
        static.copy_(host)
        entry = self.graphs.get((bucket, k.shape[3]))
        if entry is None:
            try:
                entry = self._capture(static, k.shape[3])
            except Exception:
                log.exception("CUDA graph capture failed; decoding eagerly from now on")
                self.broken = True
                self.clear()
                return None
            self.graphs[(bucket, k.shape[3])] = entry
        graph, logits = entry
        graph.replay()
        return logits[:n]

    def _forward(self, static: torch.Tensor, width: int) -> torch.Tensor:
        bf16 = self.b.policy.dtype == torch.bfloat16  # the policy's autocast, minus its cache
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            return decode_forward(
                self.b.policy.model, self.b.kv, static[0][:, None], static[1], static[2], width,
                self.params or None,
            )  # fmt: skip

    def _capture(
        self, static: torch.Tensor, width: int
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        # Warm-up on a side stream (as torch.cuda.graphs asks); it writes the same K/V the real
        # step writes, at the same slots, so it changes nothing.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._forward(static, width)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls of other threads (the event loop's) must not void the capture.
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            logits = self._forward(static, width)
        self.captures += 1
        return graph, logits
