"""Fixtures: one real desktop session (Xvfb, D-Bus, AT-SPI, openbox, server) for the whole run."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from kubecua_desktop.session.config import SessionConfig
from kubecua_desktop.session.session import DesktopSession, SessionInfo

T = TypeVar("T")
WIDTH, HEIGHT = 1280, 720  # smaller than the 1920x1080 default: cheaper on a 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll check() until it returns something truthy; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Desktop:
    info: SessionInfo
    token: str
    home: Path
    client: httpx.Client


def _require(binaries: list[str]) -> None:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        pytest.skip(f"desktop binaries missing ({', '.join(missing)}): run `make setup-apt`")


@contextlib.contextmanager
def start_desktop(home: Path, width: int = WIDTH, height: int = HEIGHT) -> Iterator[Desktop]:
    """A whole desktop session on a free display, its home in `home`, stopped afterwards."""
    _require(["Xvfb", "openbox", "dbus-daemon", "xauth", "wmctrl", "xprop", "gsettings"])
    token = secrets.token_hex(16)
    # trust_loopback: desktop-env's PythonController sends no token (see test_desktop_env).
    config = SessionConfig(
        width=width, height=height, port=free_port(), home=home, token=token, trust_loopback=True
    )
    session = DesktopSession(config)
    info = session.start()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=info.url, headers=headers, timeout=60) as client:
            yield Desktop(info=info, token=token, home=home, client=client)
    finally:
        session.stop()


@pytest.fixture(scope="session")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desktop]:
    with start_desktop(tmp_path_factory.mktemp("home")) as d:
        yield d


@contextlib.contextmanager
def token_only_server(
    env: dict[str, str], cwd: Path | None = None, timeout: float = 30
) -> Iterator[str]:
    """A desktop server started with `env` (which names KUBECUA_SANDBOX_TOKEN), on a free port,
    until it answers unauthenticated requests with 401; yields its URL, stops it afterwards."""
    port = free_port()
    argv = [sys.executable, "-m", "kubecua_desktop", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        try:
            return httpx.get(f"{url}/platform", timeout=2).status_code == 401
        except httpx.HTTPError:
            return False

    try:
        wait_for(answering, timeout, f"the server on port {port} to answer")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="session")
def strict_url(desktop: Desktop) -> Iterator[str]:
    """A second server on the same display that trusts nobody without the token."""
    with token_only_server(dict(desktop.info.env, KUBECUA_SANDBOX_TOKEN=desktop.token)) as url:
        yield url


def run(desktop: Desktop, command: list[str] | str, shell: bool = False) -> dict[str, object]:
    response = desktop.client.post("/execute", json={"command": command, "shell": shell})
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def window_titles(desktop: Desktop) -> str:
    return str(run(desktop, ["wmctrl", "-lx"])["output"])
