"""LoRA (spec.model.lora) on the tiny Qwen2.5-VL, one process on the CPU: the learner trains the
adapter alone, checkpoints hold it in peft's layout and resume exactly, the merged export equals
the adapted model, and the engine generates with the adapter just trained (verl#5220: rollouts
ran without it). The two-rank FSDP2 side is tests/test_lora_distributed.py.

Tolerances: fp32 on the CPU. Log-probs of the engine and the learner agree within 1e-4 (two
forward paths, a KV-cached decode against one full forward: summation order only; observed
~1e-6); "differ without the adapter" means by more than 100x that. Resume and reload are bitwise.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import peft
import pytest
import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText

from bench.testing.images import screenshot
from kubecua_api.lora import LoraConfig
from kubecua_trainer.cli import main
from kubecua_trainer.config import AlgorithmConfig, ConfigError, parse_training_run
from kubecua_trainer.engines.base import Generation, SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.learning.checkpoint import load_checkpoint, save_checkpoint
from kubecua_trainer.learning.learner import Learner
from kubecua_trainer.learning.learner_setup import build_learner
from kubecua_trainer.learning.logprobs import token_logprobs
from kubecua_trainer.learning.sharded import generation_copy, refresh_weights
from kubecua_trainer.lora import (
    adapter_param_names,
    add_adapter,
    file_key,
    module_key,
)
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.tokens import Conversation, Sample

ALGO = AlgorithmConfig(learning_rate=5e-2, group_size=2, dynamic_sampling=False)
LORA = LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=6, stop_token_ids=())


def adapted(model_dir: Path) -> Policy:
    policy = load_policy(str(model_dir), device="cpu")
    add_adapter(policy.model, LORA, str(model_dir))
    return policy


def samples(policy: Policy, seed: int) -> list[Sample]:
    """Two token-exact samples: a prompt with a screenshot, 6 generated ids, +-1 advantages."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(2):
        conv = Conversation(policy, "Act.", 56 * 56 * 2)
        conv.add_user(f"task {i}", screenshot(seed + i))
        ids = torch.randint(10, 200, (6,), generator=gen).tolist()
        conv.add_generation(Generation(ids, (-torch.rand(6, generator=gen)).tolist(), "length"))
        s = conv.to_sample()
        s.advantage = 1.0 if i else -1.0
        out.append(s)
    return out


def logits(model: Any, policy: Policy, sample: Sample) -> torch.Tensor:
    from kubecua_trainer.learning.logprobs import model_inputs

    with torch.no_grad():
        return model(**model_inputs(policy, sample)).logits


def test_the_learner_trains_the_adapter_alone_and_checkpoints_it_in_peft_layout(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    policy = adapted(tiny_model_dir)
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" not in n}
    learner = Learner(policy, ALGO)
    names = adapter_param_names(policy.model)
    # two attention projections + the MLP's down projection, in each of the 2 decoder layers
    assert len(names) == 2 * 3 * 2
    trained = [p for g in learner.optimizer.param_groups for p in g["params"]]
    assert len(trained) == len(names)
    first = learner.step(samples(policy, 1))
    learner.step(samples(policy, 2))
    assert first["grad_norm"] > 0
    after = dict(policy.model.named_parameters())
    assert all(torch.equal(after[n], base[n]) for n in base)  # the base never moves
    lora_b = [n for n in names if "lora_B" in n]
    assert all(float(after[n].detach().abs().max()) > 0 for n in lora_b)  # B left its zero start

    path = Path(save_checkpoint(tmp_path / "ckpt", 2, policy, learner, None, rng=False))
    files = {p.name for p in path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= files
    assert "model.safetensors" not in files  # the base is not copied into every checkpoint
    config = json.loads((path / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 8, "LORA")
    assert config["base_model_name_or_path"] == str(tiny_model_dir)
    keys = set(load_file(str(path / "adapter_model.safetensors")))
    assert keys == {file_key(n) for n in names}
    assert all(k.startswith("base_model.model.") and ".default." not in k for k in keys)
    assert {module_key(k) for k in keys} == set(names)
    optimizer = torch.load(path / "optimizer.pt", weights_only=True)["optimizer"]
    assert len(optimizer["state"]) == len(names)  # AdamW's moments: the adapter's only

    # peft itself reads the checkpoint: PeftModel.from_pretrained on the base = our policy
    sample = samples(policy, 3)[0]
    base_model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, local_files_only=True)
    with_peft = peft.PeftModel.from_pretrained(base_model, str(path)).eval()
    policy.model.eval()
    ours = logits(policy.model, policy, sample)
    assert torch.equal(logits(with_peft, policy, sample), ours)

    # the merged export is a plain HF model with the same outputs (folding is not bitwise)
    assert main(["export-merged", str(path), str(tmp_path / "merged")]) == 0
    merged = load_policy(str(tmp_path / "merged"), device="cpu")
    assert not any("lora_" in n for n, _ in merged.model.named_parameters())
    assert torch.allclose(logits(merged.model, merged, sample), ours, atol=1e-4)
    plain = logits(load_policy(str(tiny_model_dir), device="cpu").model, policy, sample)
    assert float((plain - ours).abs().max()) > 1e-2  # the adapter is in the merged weights


def test_export_merged_refuses_a_checkpoint_without_an_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export-merged", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "not a LoRA checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_lora_run_resumes_exactly(tiny_model_dir: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = adapted(tiny_model_dir)
    learner = Learner(policy, ALGO)
    learner.step(samples(policy, 1))
    path = save_checkpoint(tmp_path / "ckpt", 1, policy, learner, None)
    straight = learner.step(samples(policy, 2))
    want = {n: p.detach().clone() for n, p in policy.model.named_parameters()}

    resumed_policy = adapted(tiny_model_dir)  # a fresh adapter (B = 0) until the load
    resumed = Learner(resumed_policy, ALGO)
    assert load_checkpoint(path, resumed_policy, resumed, None)["step"] == 1
    again = resumed.step(samples(resumed_policy, 2))
    assert again["loss"] == straight["loss"]
    assert again["grad_norm"] == straight["grad_norm"]
    got = dict(resumed_policy.model.named_parameters())
    assert all(torch.equal(got[n], want[n]) for n in want)

    plain = load_policy(str(tiny_model_dir), device="cpu")  # a run without spec.model.lora
    with pytest.raises(ConfigError, match=r"spec.model.lora: the checkpoint .* holds a LoRA"):
        load_checkpoint(path, plain, Learner(plain, ALGO), None)


def set_adapters(model: torch.nn.Module, on: bool) -> None:
    for module in model.modules():
        if isinstance(module, BaseTunerLayer):
            module.enable_adapters(on)


def test_rollouts_generate_with_the_adapter_just_trained(tiny_model_dir: Path) -> None:
    """The engine's log-probs equal the learner's recomputation with the adapter and differ
    without it, both on the learner's own module (the embedded engine's default) and on the
    engine's copy (rollout.maxStaleness > 0, torchrun) after its refresh."""
    torch.manual_seed(0)
    policy = adapted(tiny_model_dir)
    copy = generation_copy(policy)
    learner = Learner(policy, ALGO)
    for seed in (1, 2, 3):
        learner.step(samples(policy, seed), version=seed)
    refresh_weights(policy.model, copy, 3)

    def rollout(gen_policy: Policy) -> tuple[Sample, list[float]]:
        async def run() -> tuple[Sample, list[float]]:
            engine = HFEngine(gen_policy)
            conv = Conversation(gen_policy, "Act.", 56 * 56 * 2)
            conv.add_user("pick", screenshot(7))
            out = await engine.generate(*conv.prompt(), SAMPLING)
            await engine.close()
            conv.add_generation(out)
            return conv.to_sample(), out.logprobs

        return asyncio.run(run())

    def recompute(sample: Sample) -> torch.Tensor:
        with torch.no_grad():
            return token_logprobs(policy, sample, SAMPLING.temperature)[0]

    for name, gen_policy in (("shared module", policy), ("engine's copy", copy)):
        sample, engine_lp = rollout(gen_policy)
        behaviour = torch.tensor(engine_lp)
        with_adapter = recompute(sample)
        assert len(engine_lp) == SAMPLING.max_new_tokens
        assert torch.allclose(with_adapter, behaviour, atol=1e-4), name
        set_adapters(policy.model, False)
        try:
            without = recompute(sample)
        finally:
            set_adapters(policy.model, True)
        assert float((without - behaviour).abs().max()) > 1e-2, name


def spec_with(lora: dict[str, Any], engine: str = "hf") -> Any:
    body = {
        "model": {"path": "/m", "lora": lora},
        "sandboxes": {"urls": ["http://a"]},
        "tasks": {"path": "/t"},
        "steps": 1,
        "rollout": {"engine": engine, "sglangUrls": ["http://s"]} if engine == "sglang" else {},
    }
    return parse_training_run(
        {
            "apiVersion": "kubecua.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": "r"},
            "spec": body,
        }
    ).spec


def test_a_target_module_the_model_lacks_fails_the_run_at_start_naming_the_field(
    tiny_model_dir: Path,
) -> None:
    spec = spec_with({"targetModules": ["q_proj", "qkv_proj"]})
    spec.model.path = str(tiny_model_dir)
    with pytest.raises(ConfigError) as err:
        build_learner(spec)
    assert str(err.value).startswith("spec.model.lora.targetModules[1]: 'qkv_proj' names no")
    assert "(its layers: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj)" in str(
        err.value
    )
    # a vision-only layer name is no language-model layer either
    spec = spec_with({"targetModules": ["qkv"]})
    spec.model.path = str(tiny_model_dir)
    with pytest.raises(ConfigError, match=r"targetModules\[0\]: 'qkv' names no linear layer"):
        build_learner(spec)
    spec = spec_with({"targetModules": ["q_proj", "fc1"]}, engine="sglang")
    spec.model.path = str(tiny_model_dir)
    with pytest.raises(ConfigError, match=r"targetModules\[1\]: 'fc1': with engine sglang"):
        build_learner(spec)


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ({"rank": 0}, "spec.model.lora.rank: Input should be greater than or equal to 1"),
        ({"rank": 257}, "spec.model.lora.rank: Input should be less than or equal to 256"),
        ({"targetModules": []}, "spec.model.lora.targetModules: List should have at least 1"),
        ({"targetModules": ["lm_head"]}, "spec.model.lora.targetModules: Value error, lm_head"),
        ({"targetModules": ["a b"]}, "spec.model.lora.targetModules[0]: String should match"),
        ({"dropout": 1.0}, "spec.model.lora.dropout: Input should be less than or equal to 0.9"),
    ],
)
def test_a_manifest_with_a_bad_lora_field_is_refused_naming_it(
    lora: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        spec_with(lora)
