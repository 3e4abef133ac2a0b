"""OSWorld's Chrome convention: `google-chrome --remote-debugging-port` plus socat in front of it
answers CDP, and `pkill chrome` stops the browser (Chromium runs under a 'chrome' name)."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest

from tests.conftest import Desktop, free_port, run, wait_for


def _cdp_version(port: int) -> dict[str, str] | None:
    try:
        version: dict[str, str] = httpx.get(f"http://127.0.0.1:{port}/json/version").json()
        return version
    except (httpx.HTTPError, ValueError):
        return None


def _chrome_pids(desktop: Desktop) -> str:
    """Live browser processes of this session's profile (zombies have no command line)."""
    profile = f"--user-data-dir={desktop.home}/.config/google-chrome"
    found = subprocess.run(["pgrep", "-f", "--", profile], capture_output=True, text=True)
    return found.stdout


def test_google_chrome_serves_cdp_through_socat_and_dies_by_pkill(desktop: Desktop) -> None:
    if shutil.which("socat") is None or shutil.which("/usr/lib/chromium/chrome") is None:
        pytest.skip("chromium, socat or the chrome link missing: run install/install-desktop.sh")
    debug, cdp = free_port(), free_port()
    launch = [
        {"command": ["google-chrome", f"--remote-debugging-port={debug}"]},
        {"command": ["socat", f"tcp-listen:{cdp},fork,reuseaddr", f"tcp:localhost:{debug}"]},
    ]  # fmt: skip
    for body in launch:
        assert desktop.client.post("/setup/launch", json=body).status_code == 200
    version = wait_for(lambda: _cdp_version(cdp), 60, "Chrome's CDP behind socat")
    assert version["Browser"].startswith("Chrome/")
    main = subprocess.run(["pgrep", "-x", "chrome"], capture_output=True, text=True).stdout
    assert set(main.split()) & set(_chrome_pids(desktop).split()), "no process named chrome"
    assert run(desktop, "pkill chrome")["returncode"] == 0
    wait_for(lambda: not _chrome_pids(desktop), 30, "every chrome process to exit")
    run(desktop, f"pkill -f tcp-listen:{cdp}")
