"""Which tasks the episode server rewrites before running them: a local sandbox maps OSWorld's
home and CDP ports to its own; a remote desktop (a VM behind a Service) gets the task as is."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubecua_episode.metrics import Metrics
from kubecua_episode.sandbox import Sandbox
from kubecua_episode.settings import Settings

CHROME = ["google-chrome", "--remote-debugging-port=1337"]
SOCAT = ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]
TASK = {
    "config": [
        {"type": "launch", "parameters": {"command": CHROME}},
        {"type": "launch", "parameters": {"command": SOCAT}},
        {"type": "execute", "parameters": {"command": "touch /home/user/a.txt", "shell": True}},
    ],
}


def _commands(task: dict[str, object]) -> list[object]:
    return [step["parameters"]["command"] for step in task["config"]]  # type: ignore[index]


def test_a_local_sandbox_gets_its_own_home_and_cdp_port(tmp_path: Path) -> None:
    settings = Settings(token="t", home=tmp_path / "home", cdp_port=19222)
    chrome, socat, touch = _commands(Sandbox(settings, Metrics()).localize(TASK))
    debug = int(str(chrome[1]).split("=")[1])  # type: ignore[index]
    assert debug != 1337
    assert socat == ["socat", "tcp-listen:19222,fork", f"tcp:localhost:{debug}"]
    assert touch == f"touch {tmp_path}/home/a.txt"


def test_a_remote_desktop_gets_the_task_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"KUBECUA_SANDBOX_TOKEN": "t", "KUBECUA_DESKTOP_URL": "http://vm-0-desktop:5000",
           "KUBECUA_CDP_URL": "http://vm-0-desktop:31222"}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert (settings.remote, settings.cdp_port) == (True, 31222)
    assert Sandbox(settings, Metrics()).localize(TASK) == TASK
