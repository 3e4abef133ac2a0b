"""Loading a TrainingRun spec: the models are the API package's (kubecua_api.trainingrun), the one
schema shared with the CRD; this module reads a manifest or the live object into them.

Field names follow docs/api.md: camelCase in YAML (aliases), snake_case in Python. Every model
forbids unknown fields, so a typo such as `groupsize` fails with the field path named. Load a spec
with `load_manifest(path)` (a TrainingRun YAML file) or `load_from_cluster(name, namespace)` (the
live object); both raise ConfigError with one line per invalid field, e.g.
`spec.algorithm.clip.high: Input should be less than or equal to 1`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import ValidationError

from kubecua_api.constants import API_VERSION, GROUP, TRAININGRUN_PLURAL, VERSION
from kubecua_api.constants import TRAININGRUN_KIND as KIND
from kubecua_api.errors import field_errors
from kubecua_api.trainingrun import (
    AlgorithmConfig,
    CheckpointConfig,
    ClipConfig,
    EvaluationConfig,
    GspoClipConfig,
    KueueConfig,
    LocalSandboxes,
    MetricsConfig,
    ModelConfig,
    PoolCapacity,
    ReplayConfig,
    RolloutConfig,
    SandboxesConfig,
    TasksConfig,
    TrainerConfig,
    TrainingRun,
    TrainingRunSpec,
    WarmupConfig,
)

__all__ = [
    "API_VERSION",
    "KIND",
    "AlgorithmConfig",
    "CheckpointConfig",
    "ClipConfig",
    "ConfigError",
    "EvaluationConfig",
    "GspoClipConfig",
    "KueueConfig",
    "LocalSandboxes",
    "MetricsConfig",
    "ModelConfig",
    "PoolCapacity",
    "ReplayConfig",
    "RolloutConfig",
    "SandboxesConfig",
    "TasksConfig",
    "TrainerConfig",
    "TrainingRun",
    "TrainingRunSpec",
    "WarmupConfig",
    "load_from_cluster",
    "load_manifest",
    "parse_training_run",
]


class ConfigError(ValueError):
    """A TrainingRun that cannot be used; the message names every bad field by its YAML path."""


def format_errors(err: ValidationError) -> str:
    """One line per error, the path as kubectl writes it (kubecua_api.errors, as the operator's):
    `spec.algorithm.groupSize: Input should be >= 2 (got 1)`."""
    return "\n".join(field_errors(err, root="", inputs=True))


def parse_training_run(obj: Any, source: str = "manifest") -> TrainingRun:
    """Validate a TrainingRun dict; raise ConfigError naming each bad field path."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{source}: expected a mapping with apiVersion/kind/spec")
    if obj.get("kind") != KIND or obj.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"{source}: expected apiVersion {API_VERSION} and kind {KIND}, "
            f"got {obj.get('apiVersion')!r} / {obj.get('kind')!r}"
        )
    try:
        return TrainingRun.model_validate(obj)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid TrainingRun\n{format_errors(err)}") from None


def load_manifest(path: str | Path) -> TrainingRun:
    """Read a TrainingRun YAML file; relative paths in it resolve against the file's folder."""
    p = Path(path)
    try:
        obj = yaml.safe_load(p.read_text())
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: not valid YAML: {err}") from None
    run = parse_training_run(obj, str(p))
    _resolve_paths(run.spec, p.resolve().parent)
    return run


def _resolve_paths(spec: TrainingRunSpec, base: Path) -> None:
    # Local manifests name paths like ${KUBECUA_CACHE}/models/tiny or ../sandbox-image/tasks.
    def resolve(value: str) -> str:
        return str(base / Path(os.path.expandvars(value)).expanduser())

    if spec.tasks.path is not None:
        spec.tasks.path = resolve(spec.tasks.path)
    if spec.evaluation is not None and spec.evaluation.tasks.path is not None:
        spec.evaluation.tasks.path = resolve(spec.evaluation.tasks.path)
    if spec.warmup is not None:
        spec.warmup.demonstrations = resolve(spec.warmup.demonstrations)
    if spec.output_dir is not None:
        spec.output_dir = resolve(spec.output_dir)
    spec.model.path = resolve(spec.model.path)


def load_from_cluster(name: str, namespace: str, api: Any = None) -> TrainingRun:
    """Read the live TrainingRun object through the kubernetes client (in-cluster or kubeconfig)."""
    if api is None:
        from kubecua_trainer.telemetry.status import custom_objects_api

        api = custom_objects_api()
    obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, TRAININGRUN_PLURAL, name)
    return parse_training_run(obj, f"trainingrun {namespace}/{name}")
