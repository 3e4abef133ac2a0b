"""trainer.compile in the synchronous loop (issue 31): the embedded engine generates with the
learner's own module, whose decoder layers are compiled. The engine's KV update indexed the cache
by each layer's `layer_idx`, an integer dynamo specialises, so every decoder layer compiled its own
graph until dynamo's recompile limit and the loop never finished on an H100. The engine now runs
the layers eagerly (engine_mode): generating adds no compiled graph, and one graph serves every
decoder layer of the learner (whose forward no longer builds a DynamicCache either: model.py).
Dynamo's "eager" backend traces and guards as inductor does without generating code, so this runs
on the CPU in about a minute."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
import torch._dynamo
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.utils import counters

from bench.testing.images import screenshot
from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.model import load_policy
from kubecua_trainer.speedups.checkpointing import layer_stacks
from kubecua_trainer.speedups.fast_paths import compile_layers
from kubecua_trainer.tokens import Conversation


def test_generation_on_compiled_layers_compiles_nothing_and_agrees(tiny_model_dir: Path) -> None:
    torch._dynamo.reset()
    counters.clear()
    policy = load_policy(str(tiny_model_dir), dtype="float32", device="cpu")
    assert compile_layers(policy.model, backend="eager") > 0
    im_end = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=(im_end,))

    async def play() -> Conversation:
        engine = HFEngine(policy)
        conv = Conversation(policy, "sys", 56 * 56 * 4)
        for turn in range(3):  # prefills of growing lengths over reused KV, then decode steps
            conv.add_user(f"turn {turn}", screenshot(turn, (150, 120)))
            conv.add_generation(await engine.generate(*conv.prompt(), sampling))
        await engine.close()
        return conv

    def decoder_graphs() -> int:  # graphs dynamo holds for the decoder layers' shared forward
        return len(_debug_get_cache_entry_list(type(text_layers[0]).forward.__code__))

    text_layers, _ = layer_stacks(policy.model)
    assert len(text_layers) > 1
    conv = asyncio.run(play())
    assert counters["stats"]["unique_graphs"] == 0  # the engine ran every layer eagerly
    sample = conv.to_sample()
    with torch.no_grad():
        logp, _ = token_logprobs(policy, sample, temperature=1.0)
    assert decoder_graphs() == 1  # one graph serves every decoder layer: no per-layer guard
    behaviour = sample.behaviour_logprobs[sample.loss_mask]
    assert torch.allclose(logp, behaviour, atol=1e-4), (logp - behaviour).abs().max()
    learner_graphs = counters["stats"]["unique_graphs"]
    asyncio.run(play())  # generating again after the learner ran compiled: still nothing new
    assert counters["stats"]["unique_graphs"] == learner_graphs
    assert decoder_graphs() == 1
    torch._dynamo.reset()
