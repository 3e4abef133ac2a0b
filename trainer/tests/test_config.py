"""The TrainingRun spec: good manifests load with docs/api.md defaults, bad ones name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubecua_trainer.cli import main
from kubecua_trainer.config import (
    API_VERSION,
    KIND,
    ConfigError,
    load_manifest,
    parse_training_run,
)
from kubecua_trainer.rollout.agent import system_prompt

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainingrun-local.yaml"


def manifest(**spec_overrides: object) -> dict:
    spec: dict = {
        "model": {"path": "/models/m"},
        "sandboxes": {"urls": ["http://127.0.0.1:8000"]},
        "tasks": {"path": "/tasks"},
        "steps": 3,
    }
    spec.update(spec_overrides)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "r"}, "spec": spec}


def test_minimal_spec_gets_documented_defaults() -> None:
    spec = parse_training_run(manifest()).spec
    algo = spec.algorithm
    assert (algo.group_size, algo.tasks_per_step, algo.max_turns) == (8, 1, 15)
    assert (algo.clip.low, algo.clip.high, algo.tis_cap, algo.learning_rate) == (
        0.2,
        0.28,
        2.0,
        1e-6,
    )
    assert algo.mode == "trajectory"
    assert algo.aggregation == "token"
    assert algo.normalize_std
    assert spec.rollout.max_pixels == 1003520
    assert spec.rollout.keep_screenshots == 3
    assert spec.checkpoint.path == "/ckpt"
    assert spec.metrics.port == 9400
    assert spec.sandboxes.min_ready == 1
    assert spec.model.dtype == "auto"


def test_camel_case_fields_map_to_snake_case() -> None:
    spec = parse_training_run(
        manifest(
            algorithm={
                "groupSize": 4,
                "clip": {"high": 0.3},
                "mode": "perTurn",
                "turnDiscount": 0.9,
                "replay": {"enabled": True, "maxPerTask": 2},
            }
        )
    ).spec
    assert spec.algorithm.group_size == 4
    assert spec.algorithm.clip.high == 0.3
    assert spec.algorithm.mode == "perTurn"
    assert spec.algorithm.turn_discount == 0.9
    assert spec.algorithm.replay.enabled
    assert spec.algorithm.replay.max_per_task == 2
    dumped = spec.model_dump(by_alias=True)
    assert dumped["algorithm"]["groupSize"] == 4
    assert "maxInFlightEpisodes" in dumped["rollout"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"algorithm": {"groupSize": 1}}, "spec.algorithm.groupSize: Input should be greater"),
        (
            {"algorithm": {"clip": {"low": 0.3, "high": 0.2}}},
            "spec.algorithm.clip: Value error, high (0.2) must be >= low (0.3)",
        ),
        ({"algorithm": {"grupSize": 4}}, "spec.algorithm.grupSize: Extra inputs are not permitted"),
        (
            {"algorithm": {"mode": "episode"}},
            "spec.algorithm.mode: Input should be 'trajectory' or 'perTurn'",
        ),
        ({"rollout": {"engine": "vllm"}}, "spec.rollout.engine: Input should be 'hf' or 'sglang'"),
        ({"steps": -1}, "spec.steps: Input should be greater than or equal to 0"),
        ({"steps": 0}, "spec.steps: Value error, steps 0 evaluates the model only: set spec.evalu"),
        (
            {"sandboxes": {"urls": ["http://a"], "poolRef": "p"}},
            "spec.sandboxes: Value error, set exactly one of poolRef, urls, local",
        ),
        ({"sandboxes": {"urls": ["ftp://a"]}}, "urls must be non-empty http(s) URLs"),
        (
            {"sandboxes": {"urls": ["http://a"], "capacity": {"episodes": 2}}},
            "spec.sandboxes: Value error, capacity asks a pool for sandboxes: it needs poolRef",
        ),
        (
            {"sandboxes": {"poolRef": "p", "capacity": {"episodes": 0}}},
            "spec.sandboxes.capacity.episodes: Input should be greater than or equal to 1",
        ),
        (
            {"sandboxes": {"local": {"replicas": 17}}},
            "spec.sandboxes.local.replicas: Input should be less than or equal to 16",
        ),
        (
            {"tasks": {"path": "/t", "configMapRef": "c"}},
            "spec.tasks: Value error, set exactly one of configMapRef, path",
        ),
        ({"model": {}}, "spec.model.path: Field required"),
        ({"reward": {"partial": -0.3}}, "spec.reward.partial: Input should be greater than or"),
        ({"reward": {"score": 30}}, "spec.reward.score: Input should be less than or equal to 10"),
        (
            {"reward": {"penalties": {"turn": 2}}},
            "spec.reward.penalties.turn: Input should be less than or equal to 1",
        ),
        ({"reward": {"partail": 0.3}}, "spec.reward.partail: Extra inputs are not permitted"),
        (
            {"rollout": {"systemPrompt": "Screen {w}x{height}."}},
            "spec.rollout.systemPrompt: Value error, only {width} and {height} may be substituted",
        ),
    ],
)
def test_invalid_field_is_named_in_the_error(overrides: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_training_run(manifest(**overrides))
    assert expected in str(err.value)


def test_every_invalid_field_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        parse_training_run(manifest(steps=-1, algorithm={"groupSize": 99, "klCoef": -1}))
    lines = str(err.value).splitlines()
    assert any(line.startswith("spec.steps:") for line in lines)
    assert any(line.startswith("spec.algorithm.groupSize:") for line in lines)
    assert any(line.startswith("spec.algorithm.klCoef:") for line in lines)


def test_wrong_kind_and_non_mapping_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"expected apiVersion kubecua\.dev/v1alpha1 and kind"):
        parse_training_run({**manifest(), "kind": "SandboxPool"})
    with pytest.raises(ConfigError, match="expected a mapping"):
        parse_training_run(["not", "a", "mapping"])


def test_manifest_file_paths_resolve_against_its_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MODELS", "/srv/models")
    m = manifest(model={"path": "${MODELS}/tiny"}, tasks={"path": "tasks"}, outputDir="out")
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(m))
    spec = load_manifest(f).spec
    assert spec.model.path == "/srv/models/tiny"
    assert spec.tasks.path == str(tmp_path / "tasks")
    assert spec.output_dir == str(tmp_path / "out")


def test_unreadable_and_broken_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_manifest(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_manifest(bad)


def test_example_manifest_is_valid_local_run(monkeypatch) -> None:
    monkeypatch.setenv("KUBECUA_CACHE", "/cache")
    run = load_manifest(EXAMPLE)
    assert run.name == "demo-local"
    assert run.spec.sandboxes.local is not None
    assert run.spec.sandboxes.local.replicas == 2
    assert run.spec.model.path == "/cache/models/bench-colourkeys-demo"  # run --prepare
    assert run.spec.tasks.path is not None
    assert run.spec.evaluation is not None
    assert run.spec.tasks.path.endswith("sandbox-image/tasks/colourkeys-demo/train")
    heldout = str(run.spec.evaluation.tasks.path)
    assert heldout.endswith("sandbox-image/tasks/colourkeys-demo/heldout")
    assert run.spec.warmup is not None
    assert run.spec.warmup.demonstrations.startswith("/cache/demonstrations/colourkeys-demo/")


def test_cli_validate_exit_codes(tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(manifest()))
    assert main(["validate", str(good)]) == 0
    assert '"groupSize": 8' in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(manifest(algorithm={"tisCap": 0.5})))
    assert main(["validate", str(bad)]) == 2
    assert (
        "spec.algorithm.tisCap: Input should be greater than or equal to 1"
        in capsys.readouterr().err
    )


def test_system_prompt_template_reaches_the_agent_prompt() -> None:
    spec = parse_training_run(
        manifest(rollout={"systemPrompt": "Type it. Screen {width}x{height}, braces {{ok}}."})
    ).spec
    assert system_prompt(320, 200, spec.rollout.system_prompt) == (
        "Type it. Screen 320x200, braces {ok}."
    )
    # Without one, the built-in prompt, with the screenshot's size in it.
    assert "(640x480 pixels" in system_prompt(640, 480, None)
