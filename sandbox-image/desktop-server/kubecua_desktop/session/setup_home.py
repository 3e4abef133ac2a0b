"""Prepare the session's home the way OSWorld's image has it: Desktop and friends, a wallpaper,
VLC's HTTP interface on the session's port with its first-run question answered, Chrome's profile
(Chrome's search engines, past its first run), a LibreOffice profile past its first start, GNOME
settings in dconf, and a default video player that is not VLC (OSWorld's Ubuntu opens videos in its
own player; tasks ask to make VLC the default). The values and their sources are
osworld_start_state.toml (start_state.py applies it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from PIL import Image, ImageDraw

from kubecua_desktop.session import chrome_profile, start_state
from kubecua_desktop.session.config import SessionConfig

WALLPAPER_KEY = ["org.gnome.desktop.background", "picture-uri"]


# LibreOffice's first start shows "Tip of the Day", a dialog that appears a moment after the
# document window and takes the keyboard focus from it, plus a "what's new" bar. OSWorld's image
# has a used profile without either; a fresh home here would show them in every episode (resets
# restore the home), and keystrokes meant for the document land in the dialog.
XCU_ITEM = (
    '<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse">'
    "<value>{value}</value></prop></item>"
)
XCU = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<oor:items xmlns:oor="http://openoffice.org/2001/registry"'
    ' xmlns:xs="http://www.w3.org/2001/XMLSchema"'
    ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n{items}\n</oor:items>\n'
)


def libreoffice_version() -> str | None:
    """major.minor of the installed LibreOffice (dpkg's "4:7.4.7-1+deb12u14" gives "7.4")."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "libreoffice-core"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.match(r"(?:\d+:)?(\d+\.\d+)", out)
    return found.group(1) if found else None


def libreoffice_profile(home: Path) -> None:
    xcu = home / ".config/libreoffice/4/user/registrymodifications.xcu"
    if xcu.exists():  # a profile the user brought: theirs to keep
        return
    settings = start_state.libreoffice_items()  # past its first start, MS formats by default
    version = libreoffice_version()
    if version:  # the version it last ran: no "what's new" bar
        settings.append(("/org.openoffice.Setup/Product", "ooSetupLastVersion", version))
    items = [XCU_ITEM.format(path=p, name=n, value=v) for p, n, v in settings]
    xcu.parent.mkdir(parents=True, exist_ok=True)
    xcu.write_text(XCU.format(items="\n".join(items)))


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
        vlcrc.write_text(start_state.vlcrc(config.vlc_host, config.vlc_port))
    start_state.chrome_first_run(home)
    chrome_profile.seed_profile(home, Path(env["KUBECUA_CHROME_BIN"]), config.width, config.height)
    default_video_player(home)
    libreoffice_profile(home)
    wallpaper = home / ".local/share/backgrounds/kubecua.png"
    if not wallpaper.exists():
        wallpaper.parent.mkdir(parents=True, exist_ok=True)
        default_wallpaper(wallpaper, config.width, config.height)
    start_state.apply_dconf(env)
    run = dict(env=dict(env), capture_output=True, timeout=30, check=True)
    subprocess.run(["gsettings", "set", *WALLPAPER_KEY, f"file://{wallpaper}"], **run)  # type: ignore[call-overload]
    # Nothing GNOME-like draws that setting here: paint the root window (feh; else a solid colour).
    paint = ["feh", "--no-fehbg", "--bg-fill", str(wallpaper)]
    if not shutil.which("feh"):
        paint = ["xsetroot", "-solid", "#14325a"]
    subprocess.run(paint, **run)  # type: ignore[call-overload]
