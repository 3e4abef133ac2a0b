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
So this package runs its own loop on the model's forward: explicit 3-D positions from the model's
own get_rope_index (per sequence, kept as a per-row delta for decoding), a KV buffer of shape
(layers, rows, kv heads, length, head dim) written at each row's own length, and a padding mask.
Decode attention groups the query heads by KV head (exact GQA with one SDPA call and no copy of
the cache); prefill packs the joining requests' new tokens in one row and runs variable-length
attention (the padded prefill, transformers' SDPA function with a mask, stays as the reference).

Exactness: behaviour log-probs are log softmax(logits / T) of the sampled id over the vocabulary
minus the banned ids, before top-p (engines/base.py), as in the static path. KV is stored in the
compute dtype: under bf16 autocast SDPA casts K and V to bf16 anyway, so storing them in bf16 is
bit-identical. Weights: the cache is keyed by Policy.version and a fingerprint of the parameters'
in-place version counters; any change (a learner step, a weight refresh, a checkpoint load)
drops every stored KV, and sequences in flight restart from their prompt, so no generation mixes
two versions of the weights.
CUDA graphs (HFEngine(cuda_graphs=True); the trainer turns them on wherever the policy is on
CUDA): the decode step is replayed from graphs, one per power-of-two row count and KV buffer, with
a bf16 copy of the text model's fp32 Linear weights (cuda_graphs.py says why).
Requests that join at the same step are prefilled in one forward (each row causal over its own
reused prefix): a small prefill costs the host's kernel launches, not the GPU's work.
torch.compile: the engine runs the module's layers eagerly even where the learner compiled them
(attention.engine_mode says why).
What it leaves out: torch.compile of the decode step, chunked prefill, and sharing one prefix
between rows without a copy (each row holds its own KV).

The parts, as nano-vllm lays out its engine (engines/hf.py holds the engine and its worker):
- sequence.py: a request as queued, running, planned and reported;
- scheduler.py: admit (prefix lookup, prefill), decode, leave, under policy.lock in rounds;
- model_runner.py: positions, the prefill and decode forwards;
- kv_rows.py and kv_caches.py: the rows' KV buffer and the cache adapters the model writes into;
- prefix_store.py: finished sequences' KV, reused by the next turn;
- images.py: screenshot digests and pixel values;
- attention.py: the engine's attention (decode GQA, packed prefill) and engine_mode;
- sampling.py: one id per row and its behaviour log-prob;
- cuda_graphs.py: the decode step replayed from CUDA graphs;
- static.py: the static reference engine (transformers generate()).
"""
