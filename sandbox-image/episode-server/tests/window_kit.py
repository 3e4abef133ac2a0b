"""Apps' windows on any desktop (a local sandbox, the container, the VM): the start state's
[[window]] entries (osworld_start_state.toml), a task whose setup starts each app as OSWorld's tasks
do, and the desktop server's own reader and rules (kubecua_desktop/session/window_geometry.py,
loaded by its path: this environment does not install kubecua_desktop), read through a desktop's
/execute and /screenshot as an evaluator would."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

SESSION = Path(__file__).resolve().parents[2] / "desktop-server/kubecua_desktop/session"
WINDOWS: list[dict[str, Any]] = tomllib.loads((SESSION / "osworld_start_state.toml").read_text())[
    "window"
]


def _load_geometry() -> ModuleType:
    name = "kubecua_window_geometry"
    spec = importlib.util.spec_from_file_location(name, SESSION / "window_geometry.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


geometry = _load_geometry()


def entry(app: str) -> dict[str, Any]:
    return next(e for e in WINDOWS if e["app"] == app)


def open_task(app: str) -> dict[str, Any]:
    """A task whose setup starts the app with its [[window]] `launch` command (Chrome with the
    socat step OSWorld's Chrome tasks add); nothing to do, scored by `infeasible`."""
    config: list[dict[str, Any]] = [
        {"type": "launch", "parameters": {"command": entry(app)["launch"]}}
    ]
    if app == "chrome":
        socat = ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]
        config.append({"type": "launch", "parameters": {"command": socat}})
    return {"id": f"window-{app}", "instruction": "Nothing to do.", "config": config,
            "evaluator": {"func": "infeasible"}}  # fmt: skip


class DesktopReader:
    """One desktop server, read the way evaluators read it (bearer token, /execute)."""

    def __init__(self, url: str, token: str, timeout: float = 120.0) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    def sh(self, script: str) -> dict[str, Any]:
        r = self.http.post("/execute", json={"command": script, "shell": True})
        r.raise_for_status()
        return dict(r.json())

    def windows(self) -> str:
        return str(self.sh(geometry.SCRIPT)["output"])

    def screenshot(self) -> bytes:
        r = self.http.get("/screenshot")
        r.raise_for_status()
        return r.content

    def check(self, app: str, kind: str, limit: float = 240.0) -> Path:
        """Waits for the app's first window to be where the start state says, saves its first
        painted frame to the output folder (returned) and checks it has not moved since."""
        want = entry(app)
        geometry.wait_where(self.windows, want, limit)
        path = geometry.output_dir(kind) / f"{app}.png"
        path.write_bytes(geometry.painted(self.screenshot))
        _, wrong = geometry.where(geometry.parse(self.windows()), want)
        assert wrong is None, f"{app} moved after it opened: {wrong}"
        return path

    def close(self) -> None:
        self.http.close()
