"""A LoRA run's sglang servers start able to load its adapters (spec.model.lora): sglang 0.5.3
refuses /load_lora_adapter without --enable-lora, and an adapter of a higher rank or of other
modules than --max-lora-rank and --lora-target-modules allow."""

from __future__ import annotations

from kubecua_operator.settings import Settings
from kubecua_operator.trainingrun import children
from kubecua_operator.trainingrun.model import parse


def server_args(model: dict) -> list[str]:
    run = parse({
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {"model": model, "sandboxes": {"urls": ["http://d:1"]}, "tasks": {"path": "/t"},
                 "rollout": {"engine": "sglang"}, "checkpoint": {"volume": "c"}, "steps": 1},
    })  # fmt: skip
    deployment, _ = children.build_sglang(run, Settings())
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_a_lora_runs_servers_start_with_its_rank_and_target_modules() -> None:
    lora = {"rank": 8, "targetModules": ["q_proj", "v_proj", "down_proj"]}
    args = server_args({"path": "/m/x", "lora": lora})
    assert args[args.index("--enable-lora") :] == [
        "--enable-lora", "--max-lora-rank", "8",
        "--lora-target-modules", "q_proj", "v_proj", "down_proj",
    ]  # fmt: skip
    assert args[:2] == ["--model-path", "/m/x"]  # the base model, which never changes
    assert "--enable-lora" not in server_args({"path": "/m/x"})
