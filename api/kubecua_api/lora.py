"""spec.model.lora of a TrainingRun: train a LoRA adapter (peft) instead of every weight.

The trainer injects the adapter with peft (kubecua_trainer/lora.py); the learner, its optimizer
and its checkpoints then hold the adapter alone. What admission can check is checked here and in
the CRD: the rank's range, the names' shape, the output head (the learner computes log-probs from
lm_head's weight itself, so an adapter there would be skipped), and, with engine sglang, the
modules sglang 0.5.3 can apply an adapter to. Whether a name matches a layer of the model is
known only once the model is loaded: the trainer fails the run at start naming the field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator

from kubecua_api.common import ApiModel

# sglang 0.5.3's SUPPORTED_LORA_TARGET_MODULES (python/sglang/srt/utils/common.py), less its
# fused names: a Hugging Face Qwen-VL has no qkv_proj or gate_up_proj layer.
SGLANG_TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
MAX_RANK = 256  # sglang's --max-lora-rank takes any; beyond this an adapter is no longer small
# A module name, or a dotted suffix of one (peft matches a target by the end of the module's name).
ModuleName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")
]


class LoraConfig(ApiModel):
    rank: int = Field(
        default=16,
        ge=1,
        le=MAX_RANK,
        description="The adapter's rank r (peft's r).",
    )
    alpha: float = Field(
        default=32.0,
        gt=0,
        le=4096,
        description="The scaling numerator: the adapter's update is multiplied by alpha / rank.",
    )
    dropout: float = Field(
        default=0.0,
        ge=0,
        le=0.9,
        description="Dropout on the adapter's input while learning (never while generating; above"
        " 0 the learner's recomputed log-probs differ from the engine's by that noise).",
    )
    target_modules: list[ModuleName] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        max_length=64,
        description="Linear layers of the language model that get an adapter, by name or dotted"
        " name suffix (peft's target_modules); the vision tower never does. Not lm_head. With"
        " engine sglang, only sglang's: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,"
        " down_proj. A name that no layer of the model has fails the run at start.",
        json_schema_extra={
            "x-kubernetes-list-type": "set",
            "default": ["q_proj", "k_proj", "v_proj", "o_proj"],
        },
    )

    @field_validator("target_modules")
    @classmethod
    def _not_the_head(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError(f"names must be unique (got {names})")
        head = [n for n in names if n.split(".")[-1] == "lm_head"]
        if head:
            raise ValueError(
                "lm_head cannot take an adapter: the learner computes log-probs from its weight"
            )
        return names


def sglang_args(lora: LoraConfig) -> list[str]:
    """The launch flags an sglang server needs to load the run's adapters (/load_lora_adapter
    refuses an adapter of a higher rank or of other modules than the server was started for)."""
    return ["--enable-lora", "--max-lora-rank", str(lora.rank),
            "--lora-target-modules", *lora.target_modules]  # fmt: skip
