"""The session launcher: two desktops side by side, each with its own display, and a clean stop."""

from __future__ import annotations

import io
import os
import secrets
from pathlib import Path

import httpx
from PIL import Image

from kubecua_desktop.session.config import SessionConfig
from kubecua_desktop.session.session import DesktopSession, is_black
from tests.conftest import Desktop, free_port


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(out, "PNG")
    return out.getvalue()


def test_is_black_detects_only_black_screens() -> None:
    assert is_black(_png((0, 0, 0)))
    assert is_black(_png((5, 5, 5)))  # noise near black still counts as black
    assert not is_black(_png((20, 40, 90)))


def test_second_session_runs_beside_the_first_and_stops_cleanly(
    desktop: Desktop, tmp_path: Path
) -> None:
    token = secrets.token_hex(8)
    config = SessionConfig(width=800, height=600, port=free_port(), home=tmp_path, token=token)
    session = DesktopSession(config)
    info = session.start()
    try:
        assert info.display != desktop.info.display
        headers = {"Authorization": f"Bearer {token}"}
        size = httpx.post(f"{info.url}/screen_size", headers=headers).json()
        assert size == {"width": 800, "height": 600}
        assert desktop.client.post("/screen_size").json() != size
        assert (tmp_path / ".config/vlc/vlcrc").read_text().count("port=8080") == 1
        pids = [child.proc.pid for child in session.children]
    finally:
        session.stop()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), f"pid {pid} survived"
    assert not Path(f"/tmp/.X11-unix/X{info.display[1:]}").exists()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def test_session_env_has_chrome_wrapper_and_python_first(desktop: Desktop) -> None:
    path = desktop.info.env["PATH"].split(os.pathsep)
    assert Path(path[0], "python").exists()
    wrapper = Path(path[1], "google-chrome")
    assert os.access(wrapper, os.X_OK)
    assert desktop.info.env["KUBECUA_CHROME_BIN"] in {
        "/usr/lib/chromium/chrome", "/usr/lib/chromium/chromium"
    }  # fmt: skip
