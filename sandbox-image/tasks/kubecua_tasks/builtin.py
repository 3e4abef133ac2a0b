"""The built-in families, as sandbox-image/tasks holds them: each one generated through its
plugin (kubecua_tasks.plugin.discover) with its registered defaults, into the tasks folder.
make_tasks.py writes them all, or with --check fails while any file differs (make lint)."""

from __future__ import annotations

from pathlib import Path

from kubecua_tasks.plugin import discover

BUILT_IN = ("offline-suite", "colourkeys", "colourkeys-quits", "colourkeys-demo", "typeword")
TASKS_DIR = Path(__file__).resolve().parents[1]


def built_in_files() -> dict[str, str]:
    families = discover()
    missing = [n for n in BUILT_IN if n not in families]
    if missing:
        raise RuntimeError(f"built-in families not installed: {missing} (uv sync in {TASKS_DIR})")
    out: dict[str, str] = {}
    for name in BUILT_IN:
        family = families[name]
        out.update(family.generate(family.parse({})))
    return out
