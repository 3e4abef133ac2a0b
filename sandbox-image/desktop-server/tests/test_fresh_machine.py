"""A fresh machine (CI) has no ~/.Xauthority and no DISPLAY: the session must not need either.
Every X client of the session gets XAUTHORITY pointing at the session's own cookie file, so
pyautogui (python-xlib) and wmctrl work and nothing is written to the caller's home."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import free_port, wait_for


def _up(url: str, headers: dict[str, str]) -> bool:
    try:
        return httpx.get(f"{url}/screenshot", headers=headers, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_session_needs_no_xauthority_in_the_callers_home(tmp_path: Path) -> None:
    caller_home, home = tmp_path / "caller", tmp_path / "home"
    caller_home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XAUTHORITY")}
    env.update(HOME=str(caller_home), KUBECUA_SANDBOX_TOKEN="t0ken")
    port = free_port()
    cmd = [sys.executable, "-m", "kubecua_desktop.session", "--width", "800", "--height", "600",
           "--port", str(port), "--home", str(home)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": "Bearer t0ken"}
    try:
        wait_for(lambda: _up(url, headers) or None, 60, "the session's desktop server")
        code = "import pyautogui; print(tuple(pyautogui.size()))"
        out = httpx.post(f"{url}/run_python", json={"code": code}, headers=headers, timeout=60)
        assert out.json()["output"] == "(800, 600)\n", out.text
        wm = httpx.post(f"{url}/execute", json={"command": ["wmctrl", "-m"]}, headers=headers)
        assert wm.json()["returncode"] == 0, wm.text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert not (caller_home / ".Xauthority").exists()
    assert not (home / ".Xauthority").exists()
