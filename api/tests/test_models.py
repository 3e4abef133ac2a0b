"""The models: defaults live here once, every example manifest parses, and a dump parses back."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kubecua_api import constants
from kubecua_api.sandboxpool import SandboxPoolSpec, SandboxPoolStatus
from kubecua_api.trainingrun import TrainingRun, TrainingRunSpec, TrainingRunStatus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MINIMAL_RUN = {
    "model": {"path": "/models/m"},
    "sandboxes": {"poolRef": "desks"},
    "tasks": {"configMapRef": "tasks"},
    "steps": 3,
}


def examples(kind: str) -> dict[str, dict]:
    """`file#index` -> manifest of that kind, across every multi-document example."""
    found = {
        f"{p.name}#{i}": doc
        for p in sorted(EXAMPLES.glob("*.yaml"))
        for i, doc in enumerate(yaml.safe_load_all(p.read_text()))
        if doc and doc.get("kind") == kind
    }
    assert found, f"no {kind} example"
    return found


def test_a_minimal_run_gets_the_documented_defaults():
    spec = TrainingRunSpec.model_validate(MINIMAL_RUN)
    assert spec.metrics.port == constants.METRICS_PORT == 9400
    assert spec.checkpoint.path == constants.CHECKPOINT_PATH == "/ckpt"
    assert (spec.algorithm.group_size, spec.algorithm.clip.low, spec.algorithm.clip.high) == (
        8,
        0.2,
        0.28,
    )
    assert (spec.algorithm.gspo_clip.low, spec.algorithm.gspo_clip.high) == (3e-4, 4e-4)
    assert (spec.rollout.engine, spec.rollout.max_pixels, spec.trainer.nodes) == ("hf", 1003520, 1)


def test_an_empty_pool_gets_the_documented_defaults():
    spec = SandboxPoolSpec.model_validate({})
    assert (spec.replicas, spec.backend, spec.warm_spares, spec.max_replicas) == (1, "pod", 0, None)
    assert (spec.desktop.os, spec.desktop.screen.width, spec.desktop.screen.height) == (
        "Ubuntu",
        1920,
        1080,
    )
    assert (spec.reset.strategy, spec.reset.verify, spec.reset.max_episodes_per_sandbox) == (
        "inPlace",
        True,
        0,
    )


@pytest.mark.parametrize(("name", "doc"), examples("TrainingRun").items())
def test_every_trainingrun_example_parses_and_round_trips(name: str, doc: dict):
    run = TrainingRun.model_validate(doc)
    dumped = run.spec.model_dump(by_alias=True, exclude_none=True)
    assert TrainingRunSpec.model_validate(dumped) == run.spec


@pytest.mark.parametrize(("name", "doc"), examples("SandboxPool").items())
def test_every_sandboxpool_example_parses_and_round_trips(name: str, doc: dict):
    spec = SandboxPoolSpec.model_validate(doc["spec"])
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert SandboxPoolSpec.model_validate(dumped) == spec
    assert "except_" not in str(dumped)  # aliases, as the API server spells them


def test_quantities_and_ports_are_int_or_string():
    pod = {"pod": {"resources": {"limits": {"cpu": 2, "memory": "4Gi"}}}}
    assert SandboxPoolSpec.model_validate({"desktop": pod}).desktop.pod.resources.limits == {  # type: ignore[union-attr]
        "cpu": 2,
        "memory": "4Gi",
    }
    with pytest.raises(ValidationError, match=r"desktop\.pod\.resources\.limits\.memory"):
        SandboxPoolSpec.model_validate(
            {"desktop": {"pod": {"resources": {"limits": {"memory": "4 GB"}}}}}
        )
    rule = {"ports": [{"port": "https"}, {"port": 53, "protocol": "UDP"}]}
    assert SandboxPoolSpec.model_validate({"egress": [rule]}).egress[0].ports[1].port == 53  # type: ignore[index]
    with pytest.raises(ValidationError, match="less than or equal to 65535"):
        SandboxPoolSpec.model_validate({"egress": [{"ports": [{"port": 70000}]}]})


def test_unknown_fields_are_refused_naming_their_path():
    with pytest.raises(ValidationError, match=r"desktop\.screen\.depth"):
        SandboxPoolSpec.model_validate({"desktop": {"screen": {"depth": 24}}})


def test_status_models_take_what_the_components_write():
    status = TrainingRunStatus.model_validate(
        {
            "phase": "Running",
            "step": 2,
            "lastCheckpoint": {"step": 2, "path": "/ckpt/step-2", "time": "2026-11-25T10:00:00Z"},
            "evaluation": {"step": 0, "successRate": 0.5, "passAtK": {"k": 2, "value": 0.75}},
            "conditions": [{"type": "TrainerReady", "status": "True", "reason": "Running"}],
        }
    )
    assert status.evaluation is not None
    assert status.evaluation.pass_at_k is not None
    assert status.evaluation.pass_at_k.value == 0.75
    pool = SandboxPoolStatus.model_validate(
        {"demand": {"sandboxes": 3, "runs": [{"name": "r", "sandboxes": 3}]}}
    )
    assert pool.demand is not None
    assert pool.demand.runs is not None
    assert pool.demand.runs[0].name == "r"
