"""A real local sandbox for the whole test session: S1's desktop session on a free Xvfb display
plus this episode server, started through the kubecua-sandbox-local launcher."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from kubecua_episode.local import DEFAULT_DESKTOP_PYTHON

TOKEN = "test-token-" + os.urandom(4).hex()
# Short enough for the watchdog test, long beyond any gap between one test's calls.
IDLE_TIMEOUT_S = 8.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_display() -> int:
    n = 50 + os.getpid() % 200
    while Path(f"/tmp/.X11-unix/X{n}").exists() or Path(f"/tmp/.X{n}-lock").exists():
        n += 1
    return n


@dataclass
class LocalSandbox:
    url: str
    token: str
    home: Path
    display: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    desktop_url: str
    cdp_port: int


def wait_ready(url: str, proc: subprocess.Popen[bytes], workdir: Path, limit: float) -> None:
    """Poll /readyz until 200 (the readiness condition), failing fast if the launcher dies."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            logs = "".join(p.read_text()[-3000:] for p in (workdir / "logs").glob("*.log"))
            raise RuntimeError(f"launcher exited {proc.returncode}:\n{logs}")
        try:
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {limit} s")


@contextlib.contextmanager
def launch(work: Path, env: dict[str, str] | None = None) -> Iterator[LocalSandbox]:
    """A local sandbox through the launcher, its files in `work`; `env` is added to ours."""
    token_file = work / "token"
    token_file.write_text(TOKEN)
    port, display, desktop_port, cdp_port = free_port(), free_display(), free_port(), free_port()
    cmd = [
        sys.executable, "-m", "kubecua_episode.local", "--display", str(display),
        "--episode-port", str(port), "--desktop-port", str(desktop_port),
        "--cdp-port", str(cdp_port), "--vlc-port", str(free_port()),
        "--token-file", str(token_file), "--workdir", str(work),
        "--idle-timeout", str(IDLE_TIMEOUT_S),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, work, 120)
        desktop_url = f"http://127.0.0.1:{desktop_port}"
        # Run as root, the launcher keeps the home where the desktop account reaches it and
        # links it as work/home: paths handed to the desktop must be the real ones.
        home = (work / "home").resolve()
        yield LocalSandbox(url, TOKEN, home, display, proc, work, desktop_url, cdp_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def needs_desktop() -> None:
    if not DEFAULT_DESKTOP_PYTHON.exists():
        pytest.skip("desktop-server venv missing: run `make sandbox-env`")
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb missing: run `make setup-apt`")


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    needs_desktop()
    with launch(tmp_path_factory.mktemp("sandbox")) as sb:
        yield sb


@pytest.fixture(scope="module")
def second_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    """Another sandbox beside `sandbox`, for a module whose episodes can share the work."""
    needs_desktop()
    with launch(tmp_path_factory.mktemp("second-sandbox")) as sb:
        yield sb
