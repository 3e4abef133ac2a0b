"""Load OSWorld task JSON from a file, a directory (recursively) or a ConfigMap's values.

A task is any JSON object with `id`, `instruction` and `evaluator`; other JSON beside them (for
example reference solutions) is ignored. `tasks.ids` restricts and orders the list.
A task's domain (OSWorld's results layout groups by it) is the folder its file lies in, else
its `snapshot` field, else "default".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubecua_trainer.config import ConfigError, TasksConfig

REQUIRED = ("id", "instruction", "evaluator")


def is_task(obj: Any) -> bool:
    return isinstance(obj, dict) and all(k in obj for k in REQUIRED)


def load_tasks(
    cfg: TasksConfig,
    namespace: str | None = None,
    api: Any = None,
    field: str = "spec.tasks",
    domains: dict[str, str] | None = None,
) -> list[dict]:
    """The tasks `cfg` names; errors name `field`. `domains`, when given, receives each loaded
    task's domain by id."""
    found: dict[str, str] = {}
    if cfg.path is not None:
        tasks = _from_path(Path(cfg.path), field, found)
    else:
        tasks = _from_config_map(str(cfg.config_map_ref), namespace or "default", api, field)
    selected = _select(tasks, cfg.ids, cfg.path or f"configmap {cfg.config_map_ref}", field)
    if domains is not None:
        for t in selected:
            tid = str(t["id"])
            domains[tid] = found.get(tid) or str(t.get("snapshot") or "default")
    return selected


def _from_path(path: Path, field: str, folders: dict[str, str]) -> list[dict]:
    if not path.exists():
        raise ConfigError(f"{field}.path: {path} does not exist")
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    tasks = []
    for f in files:
        try:
            obj = json.loads(f.read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"{field}.path: {f} is not valid JSON: {err}") from None
        found = [t for t in (obj if isinstance(obj, list) else [obj]) if is_task(t)]
        folders.update({str(t["id"]): f.resolve().parent.name for t in found})
        tasks += found
    return tasks


def _from_config_map(name: str, namespace: str, api: Any, field: str) -> list[dict]:
    """Every value of the ConfigMap is a task or a list of tasks (OSWorld JSON)."""
    from kubernetes import client, config

    from kubecua_trainer.telemetry.status import core_v1_api

    try:
        cm = core_v1_api(api).read_namespaced_config_map(name, namespace)
    except config.ConfigException as err:
        raise ConfigError(f"{field}.configMapRef: no cluster access ({err})") from None
    except client.ApiException as err:
        raise ConfigError(
            f"{field}.configMapRef: configmap {namespace}/{name}: HTTP {err.status} {err.reason}"
        ) from None
    tasks = []
    for key, value in sorted((cm.data or {}).items()):
        try:
            obj = json.loads(value)
        except ValueError as err:
            raise ConfigError(f"configmap {name} key {key}: not valid JSON: {err}") from None
        tasks += [t for t in (obj if isinstance(obj, list) else [obj]) if is_task(t)]
    return tasks


def _select(tasks: list[dict], ids: list[str] | None, where: str, field: str) -> list[dict]:
    by_id = {str(t["id"]): t for t in tasks}
    if ids:
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ConfigError(f"{field}.ids: not found in {where}: {missing}")
        return [by_id[i] for i in ids]
    if not by_id:
        raise ConfigError(f"{field}: no OSWorld tasks (objects with {REQUIRED}) in {where}")
    return list(by_id.values())
