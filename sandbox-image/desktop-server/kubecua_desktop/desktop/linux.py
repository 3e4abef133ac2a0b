"""Linux/X11 desktop: mss (XShm + XFixes cursor, capture.py) for pixels, python-xlib for
geometry, wmctrl for windows, gsettings + feh for the wallpaper, and an AT-SPI helper under
Debian's python3."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from PIL import Image
from Xlib import X, display, error

from kubecua_desktop.desktop.base import Desktop, DesktopUnavailable
from kubecua_desktop.desktop.capture import Grabber
from kubecua_desktop.procs import run_command
from kubecua_desktop.settings import Settings

ATSPI_HELPER = Path(__file__).resolve().parent.parent / "a11y" / "atspi_dump.py"
# Exit code the helper uses when pyatspi or the AT-SPI bus is missing.
ATSPI_MISSING = 3
WALLPAPER_KEY = ["org.gnome.desktop.background", "picture-uri"]


@contextmanager
def _xdisplay() -> Iterator[display.Display]:
    try:
        d = display.Display()
    except Exception as exc:  # Xlib raises several unrelated types when no display answers
        raise DesktopUnavailable(
            f"cannot open X display {os.environ.get('DISPLAY')!r}: {exc}"
        ) from exc
    try:
        yield d
    finally:
        d.close()


class LinuxDesktop(Desktop):
    platform_name = "Linux"

    def __init__(self, settings: Settings, capture_backend: str = "default") -> None:
        self.settings = settings
        self.grabber = Grabber(capture_backend)

    def screenshot(self) -> Image.Image:
        return self.grabber.screenshot()

    def screen_size(self) -> tuple[int, int]:
        with _xdisplay() as d:
            screen = d.screen()
            return screen.width_in_pixels, screen.height_in_pixels

    def cursor_position(self) -> tuple[int, int]:
        with _xdisplay() as d:
            pointer = d.screen().root.query_pointer()
            return pointer.root_x, pointer.root_y

    def window_size(self, app_class_name: str) -> tuple[int, int] | None:
        wanted = app_class_name.lower()
        with _xdisplay() as d:
            root = d.screen().root
            prop = root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
            for window_id in prop.value if prop else []:
                try:
                    window = d.create_resource_object("window", window_id)
                    classes = window.get_wm_class() or ()
                    if wanted in (c.lower() for c in classes):
                        geometry = window.get_geometry()
                        return geometry.width, geometry.height
                except error.XError:
                    continue
        return None

    def window_titles(self) -> list[str]:
        result = run_command(["wmctrl", "-l"], timeout=10)
        # wmctrl -l: "<id> <desktop> <host> <title...>"
        return [
            line.split(None, 3)[3] for line in result.output.splitlines() if line.count(" ") >= 3
        ]

    def _wmctrl(self, verb: str, name: str, strict: bool, by_class: bool) -> bool:
        flags = "-" + ("x" if by_class else "") + ("F" if strict else "") + verb
        return run_command(["wmctrl", flags, name], timeout=10).returncode == 0

    def activate_window(self, name: str, strict: bool, by_class: bool) -> bool:
        return self._wmctrl("a", name, strict, by_class)

    def close_window(self, name: str, strict: bool, by_class: bool) -> bool:
        return self._wmctrl("c", name, strict, by_class)

    def _atspi(self, mode: str) -> str:
        python = self.settings.atspi_python
        if not shutil.which(python):
            raise DesktopUnavailable(f"AT-SPI helper interpreter {python!r} not found")
        result = run_command([python, str(ATSPI_HELPER), mode], timeout=60)
        if result.returncode == ATSPI_MISSING:
            raise DesktopUnavailable(f"AT-SPI is not available: {result.error.strip()}")
        if result.returncode != 0:
            detail = "timed out" if result.timed_out else result.error.strip()[-500:]
            raise DesktopUnavailable(f"AT-SPI helper failed: {detail}")
        return result.output

    def accessibility_tree(self) -> str:
        return self._atspi("tree")

    def terminal_output(self) -> str | None:
        output: str | None = json.loads(self._atspi("terminal"))["output"]
        return output

    def wallpaper_path(self) -> Path | None:
        result = run_command(["gsettings", "get", *WALLPAPER_KEY], timeout=10)
        raw = result.output.strip().strip("'").removeprefix("file://")
        return Path(raw) if result.returncode == 0 and raw else None

    def set_wallpaper(self, path: Path) -> None:
        result = run_command(["gsettings", "set", *WALLPAPER_KEY, f"file://{path}"], timeout=10)
        if result.returncode != 0:
            raise DesktopUnavailable(f"gsettings failed: {result.error.strip()}")
        # No GNOME shell draws gsettings' wallpaper here; paint the root window ourselves.
        if shutil.which("feh"):
            run_command(["feh", "--no-fehbg", "--bg-fill", str(path)], timeout=30)

    def open_command(self, path: Path) -> list[str]:
        return ["xdg-open", str(path)]

    def recording_command(self, output: Path) -> list[str]:
        width, height = self.screen_size()
        return [
            "ffmpeg", "-y", "-loglevel", "error", "-f", "x11grab", "-draw_mouse", "1",
            "-video_size", f"{width}x{height}", "-framerate", "10",
            "-i", os.environ.get("DISPLAY", ":0"),
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(output),
        ]  # fmt: skip
