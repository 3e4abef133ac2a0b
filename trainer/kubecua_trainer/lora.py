"""LoRA adapters (spec.model.lora) with peft: inject, save and load in peft's layout, merge.

The adapter is injected into the policy's own module (peft's inject_adapter_in_model), so the
model keeps its class and everything that reads it (the learner's log-probs, the embedded
engine's generation, FSDP2's layer stacks) runs through the adapter with no second wrapper.
peft marks only the adapter's parameters trainable, so the learner's AdamW, its state and the
checkpoint's optimizer.pt hold the adapter alone.

The adapter goes on the language model only (exclude_modules below): sglang applies adapters to
the language model's layers, and a Qwen-VL vision block also names layers gate_proj/up_proj/
down_proj, which would otherwise take an adapter that sglang leaves out.

A checkpoint (or the weights directory an sglang server loads) holds adapter_config.json and
adapter_model.safetensors, as PeftModel.save_pretrained writes them: tensors keyed by
"base_model.model.<module>.lora_A.weight", so PeftModel.from_pretrained(base, dir) and sglang's
/load_lora_adapter read it as any peft adapter. `python -m kubecua_trainer export-merged` folds
it into the base weights (merge_and_unload) for any Hugging Face consumer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import peft
import torch
from safetensors.torch import load_file, save_file

from kubecua_api.lora import LoraConfig
from kubecua_trainer.config import ConfigError

ADAPTER = "default"  # peft's adapter name; files never carry it
PREFIX = "base_model.model."  # PeftModel's module names: its files load with from_pretrained
CONFIG_FILE = "adapter_config.json"  # peft's CONFIG_NAME
WEIGHTS_FILE = "adapter_model.safetensors"  # peft's SAFETENSORS_WEIGHTS_NAME
# Module names peft must leave alone: the vision tower (`model.visual...`).
EXCLUDE = r"(.*\.)?visual(\..*)?"
FIELD = "spec.model.lora.targetModules"


def _language_linears(model: torch.nn.Module) -> list[str]:
    """Names of the nn.Linear layers an adapter may go on: the language model's, not lm_head."""
    out = []
    for name, module in model.named_modules():
        parts = name.split(".")
        if isinstance(module, torch.nn.Linear) and "visual" not in parts and parts[-1] != "lm_head":
            out.append(name)
    return out


def check_targets(model: torch.nn.Module, cfg: LoraConfig, where: str, engine: str) -> None:
    """Refuse a target name that matches no language-model linear layer (peft matches a name by
    the end of the module's dotted name), naming the field; sglang's set with engine sglang."""
    linears = _language_linears(model)
    if engine == "sglang":
        from kubecua_api.lora import SGLANG_TARGET_MODULES

        for i, name in enumerate(cfg.target_modules):
            if name not in SGLANG_TARGET_MODULES:
                raise ConfigError(
                    f"{FIELD}[{i}]: {name!r}: with engine sglang only {SGLANG_TARGET_MODULES} "
                    "can take an adapter (sglang's --lora-target-modules)"
                )
    for i, name in enumerate(cfg.target_modules):
        if not any(n == name or n.endswith("." + name) for n in linears):
            known = sorted({n.split(".")[-1] for n in linears})
            raise ConfigError(
                f"{FIELD}[{i}]: {name!r} names no linear layer of the language model in {where} "
                f"(its layers: {', '.join(known)})"
            )


def peft_config(cfg: LoraConfig, base: str) -> peft.LoraConfig:
    return peft.LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        exclude_modules=EXCLUDE,
        base_model_name_or_path=base,
    )


def add_adapter(model: torch.nn.Module, cfg: LoraConfig, base: str, engine: str = "hf") -> None:
    """Inject a fresh adapter (B = 0: the policy is unchanged until the first update) into
    `model` in place; every other parameter is frozen. ConfigError names a bad target."""
    check_targets(model, cfg, base, engine)
    peft.inject_adapter_in_model(peft_config(cfg, base), model, adapter_name=ADAPTER)


def is_lora(model: torch.nn.Module) -> bool:
    """Whether an adapter was injected (peft sets peft_config on the module it injects into)."""
    return bool(getattr(model, "peft_config", None))


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


def adapter_param_names(model: torch.nn.Module) -> list[str]:
    """The adapter's parameters by module name (what the optimizer trains)."""
    return [n for n, p in model.named_parameters() if "lora_" in n and p.requires_grad]


def file_key(name: str) -> str:
    """A module's parameter name -> its key in adapter_model.safetensors.

    Example: model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight ->
    base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight."""
    return PREFIX + name.replace(f".{ADAPTER}.", ".")


def module_key(key: str) -> str:
    """The inverse of file_key."""
    name = key.removeprefix(PREFIX)
    for part in ("lora_A", "lora_B"):
        name = name.replace(f".{part}.", f".{part}.{ADAPTER}.")
    return name


def save_adapter(
    dir: str | Path, model: torch.nn.Module, state: dict[str, torch.Tensor] | None = None
) -> None:
    """adapter_config.json + adapter_model.safetensors into dir. state: the adapter's tensors by
    module name when the module itself is sharded (gathered by the caller), else read here."""
    out = Path(dir)
    out.mkdir(parents=True, exist_ok=True)
    if state is None:
        params = dict(model.named_parameters())
        state = {n: params[n].detach() for n in adapter_param_names(model)}
    tensors = {file_key(n): t.detach().cpu().contiguous() for n, t in state.items()}
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    cfg: Any = getattr(model, "peft_config")[ADAPTER]  # noqa: B009 (set by peft, untyped)
    cfg.save_pretrained(str(out))


def read_adapter(dir: str | Path) -> dict[str, torch.Tensor]:
    """The adapter's tensors by module name (module_key of the file's keys)."""
    return {module_key(k): v for k, v in load_file(str(Path(dir) / WEIGHTS_FILE)).items()}


def check_layout(ckpt: str | Path, model: torch.nn.Module) -> None:
    """A checkpoint must be of the same kind as the run: adapter with spec.model.lora, full
    weights without; else a ConfigError saying what to change."""
    adapter, lora = is_adapter_dir(ckpt), is_lora(model)
    if adapter and not lora:
        raise ConfigError(
            f"spec.model.lora: the checkpoint {ckpt} holds a LoRA adapter, but this run has no "
            "spec.model.lora; set it as the checkpoint's run had it, or export a merged model "
            "(python -m kubecua_trainer export-merged) and start a new run from it"
        )
    if lora and not adapter:
        raise ConfigError(
            f"spec.model.lora: the checkpoint {ckpt} holds full weights (a run without LoRA); "
            "remove spec.model.lora to resume it, or start the LoRA run with a new checkpoint path"
        )


def load_adapter(dir: str | Path, model: torch.nn.Module) -> None:
    """Copy a saved adapter into the injected one; its shapes and names must match."""
    saved = read_adapter(dir)
    names = set(adapter_param_names(model))
    if set(saved) != names:
        missing, extra = sorted(names - set(saved)), sorted(set(saved) - names)
        raise ConfigError(
            f"spec.model.lora: the adapter in {dir} does not fit this run's (rank, target "
            f"modules must stay as they were): missing {missing[:3]}, unexpected {extra[:3]}"
        )
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in saved.items():
            if params[name].shape != tensor.shape:
                raise ConfigError(
                    f"spec.model.lora.rank: the adapter in {dir} has {name} of shape "
                    f"{tuple(tensor.shape)}, this run {tuple(params[name].shape)}"
                )
            params[name].copy_(tensor.to(params[name].dtype))


def export_merged(checkpoint: str | Path, out: str | Path, base: str | None = None) -> str:
    """Fold a checkpoint's adapter into its base model and write a Hugging Face model directory
    (weights, config, processor) to `out`; returns out. base: the base model's directory
    (default: the one the adapter names, the run's spec.model.path). The merge runs in fp32 and
    the result is saved in the base's own dtype."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    ckpt = Path(checkpoint)
    if not is_adapter_dir(ckpt):
        raise ConfigError(f"{ckpt}: no {CONFIG_FILE}: not a LoRA checkpoint")
    base = base or json.loads((ckpt / CONFIG_FILE).read_text()).get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise ConfigError(f"--base: the base model directory {base!r} does not exist; give --base")
    model = AutoModelForImageTextToText.from_pretrained(
        base, dtype=torch.float32, local_files_only=True
    )
    merged: Any = peft.PeftModel.from_pretrained(model, str(ckpt)).merge_and_unload()
    dtype = getattr(AutoConfig.from_pretrained(base, local_files_only=True), "dtype", None)
    if isinstance(dtype, torch.dtype):
        merged.to(dtype)
    target = Path(out)
    tmp = target.with_name(f".tmp-{target.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(tmp)
    source = ckpt if (ckpt / "preprocessor_config.json").is_file() else Path(base)
    AutoProcessor.from_pretrained(str(source), local_files_only=True).save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return str(target)
