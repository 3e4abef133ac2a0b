"""Prepare the session's home the way OSWorld's image has it: Desktop and friends, a wallpaper,
VLC's HTTP interface on the session's port with its first-run question answered, Chrome's profile
directory, and a default video player that is not VLC (OSWorld's Ubuntu opens videos in its own
player; tasks ask to make VLC the default)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image, ImageDraw

if TYPE_CHECKING:
    from kubecua_desktop.session.session import SessionConfig

WALLPAPER_KEY = ["org.gnome.desktop.background", "picture-uri"]
# VLC's HTTP interface as OSWorld's getters expect it (password "password"), on our port.
VLCRC = """[qt]
qt-privacy-ask=0
[core]
metadata-network-access=0
extraintf=http
[http]
host=127.0.0.1
port={port}
password=password
"""


VIDEO_PLAYER = "videos.desktop"
VIDEO_ENTRY = """[Desktop Entry]
Type=Application
Name=Videos
Exec=ffplay -autoexit %f
Terminal=false
NoDisplay=false
MimeType={types};
"""
VLC_ENTRY = Path("/usr/share/applications/vlc.desktop")


def video_types() -> list[str]:
    """The video types VLC claims (the ones OSWorld's default-player getter counts)."""
    types = ["video/mp4", "video/x-matroska", "video/webm", "video/x-msvideo", "video/mpeg"]
    if VLC_ENTRY.exists():
        for line in VLC_ENTRY.read_text().splitlines():
            if line.startswith("MimeType="):
                types = [t for t in line[9:].split(";") if t.startswith("video/")]
    return types


def default_video_player(home: Path) -> None:
    types = video_types()
    apps = home / ".local/share/applications"
    apps.mkdir(parents=True, exist_ok=True)
    (apps / VIDEO_PLAYER).write_text(VIDEO_ENTRY.format(types=";".join(types)))
    mimeapps = home / ".config/mimeapps.list"
    if not mimeapps.exists():
        lines = ["[Default Applications]", *(f"{t}={VIDEO_PLAYER}" for t in types)]
        mimeapps.write_text("\n".join(lines) + "\n")


def default_wallpaper(path: Path, width: int, height: int) -> None:
    """A vertical blue gradient: never black, so 'screen is black' means a real failure."""
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    for y in range(height):
        shade = 60 + 80 * y // max(height - 1, 1)
        draw.line([(0, y), (width, y)], fill=(20, shade // 2, shade))
    image.save(path, "PNG", compress_level=1)


def prepare_home(config: SessionConfig, env: Mapping[str, str]) -> None:
    home = config.home
    for sub in ("Desktop", "Documents", "Downloads", ".config/google-chrome", ".config/vlc"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    vlcrc = home / ".config/vlc/vlcrc"
    if not vlcrc.exists():
        vlcrc.write_text(VLCRC.format(port=config.vlc_port))
    default_video_player(home)
    wallpaper = home / ".local/share/backgrounds/kubecua.png"
    if not wallpaper.exists():
        wallpaper.parent.mkdir(parents=True, exist_ok=True)
        default_wallpaper(wallpaper, config.width, config.height)
    run = dict(env=dict(env), capture_output=True, timeout=30, check=True)
    subprocess.run(["gsettings", "set", *WALLPAPER_KEY, f"file://{wallpaper}"], **run)  # type: ignore[call-overload]
    # Nothing GNOME-like draws that setting here: paint the root window (feh; else a solid colour).
    paint = ["feh", "--no-fehbg", "--bg-fill", str(wallpaper)]
    if not shutil.which("feh"):
        paint = ["xsetroot", "-solid", "#14325a"]
    subprocess.run(paint, **run)  # type: ignore[call-overload]
