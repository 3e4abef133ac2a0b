"""Load OSWorld task JSON from a file, a directory (recursively) or a ConfigMap's values.

A task is any JSON object with `id`, `instruction` and `evaluator`; other JSON beside them (for
example reference solutions) is ignored. `tasks.ids` restricts and orders the list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubecua_trainer.config import ConfigError, TasksConfig

REQUIRED = ("id", "instruction", "evaluator")


def is_task(obj: Any) -> bool:
    return isinstance(obj, dict) and all(k in obj for k in REQUIRED)


def load_tasks(cfg: TasksConfig, namespace: str | None = None, api: Any = None) -> list[dict]:
    if cfg.path is not None:
        tasks = _from_path(Path(cfg.path))
    else:
        tasks = _from_config_map(str(cfg.config_map_ref), namespace or "default", api)
    return _select(tasks, cfg.ids, cfg.path or f"configmap {cfg.config_map_ref}")


def _from_path(path: Path) -> list[dict]:
    if not path.exists():
        raise ConfigError(f"spec.tasks.path: {path} does not exist")
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    tasks = []
    for f in files:
        try:
            obj = json.loads(f.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"spec.tasks.path: {f} is not valid JSON: {err}") from None
        tasks += [t for t in (obj if isinstance(obj, list) else [obj]) if is_task(t)]
    return tasks


def _from_config_map(name: str, namespace: str, api: Any) -> list[dict]:
    """Every value of the ConfigMap is a task or a list of tasks (OSWorld JSON)."""
    from kubernetes import client, config

    from kubecua_trainer.status import core_v1_api

    try:
        cm = core_v1_api(api).read_namespaced_config_map(name, namespace)
    except config.ConfigException as err:
        raise ConfigError(f"spec.tasks.configMapRef: no cluster access ({err})") from None
    except client.ApiException as err:
        raise ConfigError(
            f"spec.tasks.configMapRef: configmap {namespace}/{name}: HTTP {err.status} {err.reason}"
        ) from None
    tasks = []
    for key, value in sorted((cm.data or {}).items()):
        try:
            obj = json.loads(value)
        except ValueError as err:
            raise ConfigError(f"configmap {name} key {key}: not valid JSON: {err}") from None
        tasks += [t for t in (obj if isinstance(obj, list) else [obj]) if is_task(t)]
    return tasks


def _select(tasks: list[dict], ids: list[str] | None, where: str) -> list[dict]:
    by_id = {str(t["id"]): t for t in tasks}
    if ids:
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ConfigError(f"spec.tasks.ids: not found in {where}: {missing}")
        return [by_id[i] for i in ids]
    if not by_id:
        raise ConfigError(f"spec.tasks: no OSWorld tasks (objects with {REQUIRED}) in {where}")
    return list(by_id.values())
