"""desktop-env's own DesktopEnv, through the attach provider (kubecua_episode.provider), runs
tasks of the offline suite end to end against the desktop server: setup verbs (execute, command,
launch, open, activate_window, sleep), pyautogui steps, and its evaluator with vm_command_line,
vm_file and Chrome CDP getters. The episode server holds the sandbox meanwhile, and DesktopEnv's
"revert to snapshot" is the episode server's release, so its reset cleans up after DesktopEnv."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from conftest import LocalSandbox, free_port

from kubecua_episode.desktop import authorize_requests_to
from kubecua_episode.osworld import map_home, map_ports
from kubecua_episode.provider import DesktopAddress, attach_desktop_env

SUITE = Path(__file__).resolve().parents[2] / "tasks"
TASKS = [
    "files/csv-total",  # execute; vm_command_line
    "libreoffice/calc-fill-total",  # open, activate_window; vm_file
    "browser/chrome-open-page",  # launch (Chrome + socat); CDP open_tabs_info
    "editor/gedit-greeting",  # launch, activate_window; typing
]
MORE_VERBS = [
    {"type": "command", "parameters": {"command": ["true"]}},
    {"type": "sleep", "parameters": {"seconds": 0.2}},
]
HOLD = {  # what the episode server runs while DesktopEnv has the desktop
    "id": "hold",
    "instruction": "held for desktop-env",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "true", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": ""}},
    },
}


class Holder:
    """Claims the sandbox through the episode server; `reset` releases and claims again. A WAIT
    step every 2 s keeps the claim from the idle watchdog (8 s in these tests): DesktopEnv
    talks to the desktop, never to the episode server."""

    def __init__(self, http: httpx.Client) -> None:
        self.http, self.episode = http, ""
        self.releases: list[dict[str, Any]] = []
        self.lock, self.stop = threading.Lock(), threading.Event()
        threading.Thread(target=self._keep_alive, daemon=True).start()

    def _keep_alive(self) -> None:
        while not self.stop.wait(2.0):
            with self.lock:
                if self.episode:
                    self.http.post(f"/episodes/{self.episode}/step", json={"action": "WAIT"})

    def claim(self) -> None:
        with self.lock:
            self._claim()

    def _claim(self) -> None:
        resp = self.http.post("/episodes", json={"task": HOLD})
        assert resp.status_code == 201, resp.text[:500]
        self.episode = resp.json()["episode_id"]

    def release(self) -> None:
        with self.lock:
            self._release()
        self.stop.set()

    def _release(self) -> None:
        resp = self.http.delete(f"/episodes/{self.episode}")
        assert resp.status_code == 200, resp.text[:500]
        self.releases.append(resp.json())
        self.episode = ""

    def reset(self) -> None:
        with self.lock:
            self._release()
            self._claim()


def _task(name: str, sandbox: LocalSandbox) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = SUITE / f"{name}.json"
    task = json.loads(path.read_text())
    task = map_home(map_ports(task, sandbox.cdp_port, free_port()), str(sandbox.home))
    task["config"] = MORE_VERBS + task["config"]
    reference = json.loads(path.with_suffix(".solutions.json").read_text())["reference"]
    return task, reference


def test_desktop_env_runs_suite_tasks_through_the_attach_provider(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    auth = {"Authorization": f"Bearer {sandbox.token}"}
    desktop = urlsplit(sandbox.desktop_url)
    assert desktop.hostname
    assert desktop.port
    address = DesktopAddress(desktop.hostname, desktop.port, sandbox.cdp_port)
    authorize_requests_to(sandbox.desktop_url, sandbox.token)  # desktop-env sends no headers
    scores: dict[str, float] = {}
    with httpx.Client(base_url=sandbox.url, headers=auth, timeout=180) as http:
        holder = Holder(http)
        holder.claim()
        try:
            env = attach_desktop_env(
                address, reset=holder.reset, action_space="pyautogui",
                cache_dir=str(tmp_path / "cache"), require_a11y_tree=False,
            )  # fmt: skip
            for name in TASKS:
                task, reference = _task(name, sandbox)
                obs = env.reset(task_config=task)
                assert obs["screenshot"][:4] == b"\x89PNG"
                assert obs["instruction"] == task["instruction"]
                for step in reference:
                    action = step["action"]
                    # DesktopEnv.evaluate reads files at once; OSWorld's runner waits before it
                    # (a LibreOffice save is asynchronous): DONE pauses as that runner does.
                    env.step(action, pause=5.0 if action in ("DONE", "FAIL") else 1.0)
                scores[name] = float(env.evaluate())
        finally:
            holder.release()
    assert scores == dict.fromkeys(TASKS, 1.0)
    # DesktopEnv reverted between tasks through the provider: each revert was a clean release.
    assert len(holder.releases) == len(TASKS)
    assert all(r["clean"] for r in holder.releases), holder.releases
