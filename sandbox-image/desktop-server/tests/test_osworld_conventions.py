"""The session has the system pieces OSWorld's tasks assume: a sound server with a sink and a
volume, a terminal on Ctrl+Alt+T, VLC's first-run question answered, and a default video player
that is not VLC (tasks ask to make VLC the default)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.conftest import Desktop, wait_for


def _sh(desktop: Desktop, command: str) -> dict[str, Any]:
    out = desktop.client.post("/execute", json={"command": command, "shell": True}).json()
    return dict(out)


def test_sound_server_has_a_default_sink_whose_volume_can_be_set(desktop: Desktop) -> None:
    assert _sh(desktop, "pactl get-default-sink")["output"].strip() == "kubecua"
    before = _sh(desktop, "pactl get-sink-volume @DEFAULT_SINK@")["output"]
    try:
        assert _sh(desktop, "pactl set-sink-volume @DEFAULT_SINK@ 35%")["returncode"] == 0
        after = _sh(desktop, "pactl get-sink-volume @DEFAULT_SINK@")["output"]
        assert set(re.findall(r"(\d+)%", after)) == {"35"}
    finally:
        raw = " ".join(re.findall(r":\s*(\d+)\s*/", before))
        _sh(desktop, f"pactl set-sink-volume @DEFAULT_SINK@ {raw}")


def test_ctrl_alt_t_opens_a_terminal(desktop: Desktop) -> None:
    if _sh(desktop, "command -v gnome-terminal")["returncode"] != 0:
        pytest.skip("gnome-terminal is not installed (make setup-apt)")
    before = _sh(desktop, "wmctrl -lx")["output"].count("erminal")
    desktop.client.post("/execute", json={"command": "xdotool key ctrl+alt+t", "shell": True})
    try:
        wait_for(
            lambda: _sh(desktop, "wmctrl -lx")["output"].count("erminal") > before or None,
            timeout=60, what="a terminal window after Ctrl+Alt+T",
        )  # fmt: skip
    finally:  # close it on this display only (other sessions may share the host)
        _sh(desktop, "wmctrl -x -c gnome-terminal")


def test_vlc_first_run_question_is_answered(desktop: Desktop) -> None:
    vlcrc = (desktop.home / ".config/vlc/vlcrc").read_text()
    assert "qt-privacy-ask=0" in vlcrc
    assert "extraintf=http" in vlcrc


def test_default_video_player_is_not_vlc(desktop: Desktop) -> None:
    for kind in ("video/mp4", "video/x-matroska", "video/webm"):
        out = _sh(desktop, f"xdg-mime query default {kind}")["output"].strip()
        assert out == "videos.desktop", (kind, out)


def _settled(desktop: Desktop, frames: int = 5) -> bool:
    """The screen stayed the same for two seconds (five frames half a second apart): the app
    has finished starting (the tip dialog comes about half a second after the window)."""
    first = desktop.client.get("/screenshot").content
    for _ in range(frames - 1):
        time.sleep(0.5)
        if desktop.client.get("/screenshot").content != first:
            return False
    return True


def test_libreoffice_starts_without_first_start_dialogs(desktop: Desktop) -> None:
    """A fresh home shows Tip of the Day a moment after the document window; it takes the focus,
    so an agent's (or a reference solution's) typing lands in the dialog."""
    if _sh(desktop, "command -v soffice")["returncode"] != 0:
        pytest.skip("LibreOffice is not installed (make setup-apt)")
    _sh(desktop, "setsid soffice --calc >/dev/null 2>&1 &")
    try:
        wait_for(
            lambda: "LibreOffice Calc" in _sh(desktop, "wmctrl -l")["output"],
            timeout=120, what="a LibreOffice Calc window",
        )  # fmt: skip
        wait_for(lambda: _settled(desktop), timeout=60, what="Calc to finish drawing")
        windows = _sh(desktop, "wmctrl -l")["output"]
        assert "Tip of the Day" not in windows
        active = _sh(desktop, "xdotool getactivewindow getwindowname")["output"]
        assert "LibreOffice Calc" in active
    finally:
        _sh(desktop, "wmctrl -c 'LibreOffice Calc'")
        wait_for(
            lambda: "LibreOffice" not in _sh(desktop, "wmctrl -l")["output"],
            timeout=60, what="Calc to close",
        )  # fmt: skip
