"""Where an app's window is, read back from any desktop through its /execute (xprop and xwininfo, in
the image, the VM and on a host), and whether that is where the start state says it opens
([[window]] in osworld_start_state.toml).

No import from this package and nothing beyond Pillow: the episode server's tests, whose
environment does not install kubecua_desktop, load this file by its path to check the container
and VM desktops with the same rules as the desktop server's own tests.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageChops

# Prints the screen, the work area and, for each managed window, its properties and geometry.
# xwininfo gives the client window's absolute position and size; _NET_FRAME_EXTENTS the window
# manager's decoration around it (left, right, top, bottom), so the frame is known too.
SCRIPT = r"""xwininfo -root | grep -E '^ +(Width|Height):'
xprop -root _NET_WORKAREA
for w in $(xprop -root _NET_CLIENT_LIST | sed -n 's/.*# //p' | tr -d ,); do
  echo "window $w"
  xprop -id "$w" WM_CLASS _NET_WM_WINDOW_TYPE _NET_WM_STATE _NET_FRAME_EXTENTS
  xwininfo -id "$w" | grep -E 'Absolute upper-left|^ +(Width|Height):|Map State:'
done
"""
MAXIMIZED = frozenset({"_NET_WM_STATE_MAXIMIZED_VERT", "_NET_WM_STATE_MAXIMIZED_HORZ"})
# How far a centred window's centre may sit from the work area's (pixels); a window the manager
# did not centre sits hundreds of pixels off (openbox's smart placement: the top left).
CENTRE_SLACK = 24


@dataclass(frozen=True)
class Rect:
    x: int
    y: int
    width: int
    height: int

    def __str__(self) -> str:
        return f"{self.width}x{self.height}+{self.x}+{self.y}"


@dataclass
class Window:
    id: str
    wm_class: str = ""
    types: set[str] = field(default_factory=set)
    states: set[str] = field(default_factory=set)
    extents: tuple[int, int, int, int] = (0, 0, 0, 0)  # left, right, top, bottom
    client: Rect = Rect(0, 0, 0, 0)
    viewable: bool = False

    @property
    def frame(self) -> Rect:
        left, right, top, bottom = self.extents
        c = self.client
        return Rect(c.x - left, c.y - top, c.width + left + right, c.height + top + bottom)

    @property
    def maximized(self) -> bool:
        return self.states >= MAXIMIZED

    def __str__(self) -> str:
        state = "maximized" if self.maximized else "not maximized"
        return f"{self.wm_class} {self.id}: frame {self.frame}, window {self.client}, {state}"


@dataclass
class Screen:
    size: tuple[int, int]
    work_area: Rect
    windows: list[Window]


def _atoms(line: str) -> set[str]:
    return {a.strip() for a in line.split("=", 1)[1].split(",") if a.strip()}


def _numbers(line: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", line.split("=", 1)[1])]


def parse(output: str) -> Screen:
    """SCRIPT's output as a Screen."""
    size: dict[str, int] = {}
    area = Rect(0, 0, 0, 0)
    windows: list[Window] = []
    x = y = 0
    for raw in output.splitlines():
        line = raw.strip()
        key, _, value = line.partition(":")
        if line.startswith("window "):
            windows.append(Window(line.split()[1]))
        elif line.startswith("_NET_WORKAREA"):
            area = Rect(*_numbers(line)[:4])
        elif not windows and key in ("Width", "Height"):
            size[key] = int(value)
        elif line.startswith("WM_CLASS") and "=" in line:
            windows[-1].wm_class = re.findall(r'"([^"]*)"', line)[-1]
        elif line.startswith("_NET_WM_WINDOW_TYPE") and "=" in line:
            windows[-1].types = _atoms(line)
        elif line.startswith("_NET_WM_STATE") and "=" in line:
            windows[-1].states = _atoms(line)
        elif line.startswith("_NET_FRAME_EXTENTS") and "=" in line:
            left, right, top, bottom = _numbers(line)[:4]
            windows[-1].extents = (left, right, top, bottom)
        elif key == "Absolute upper-left X":
            x = int(value)
        elif key == "Absolute upper-left Y":
            y = int(value)
        elif key == "Width":
            windows[-1].client = Rect(x, y, int(value), 0)
        elif key == "Height":
            c = windows[-1].client
            windows[-1].client = Rect(c.x, c.y, c.width, int(value))
        elif key == "Map State":
            windows[-1].viewable = value.strip() == "IsViewable"
    return Screen((size.get("Width", 0), size.get("Height", 0)), area, windows)


def app_windows(screen: Screen, entry: Mapping[str, Any]) -> list[Window]:
    """The app's normal top-level windows that are showing (not its splash or dialogs)."""
    return [
        w for w in screen.windows
        if w.wm_class == entry["wm_class"] and w.viewable
        and (not w.types or "_NET_WM_WINDOW_TYPE_NORMAL" in w.types)
    ]  # fmt: skip


def mismatch(entry: Mapping[str, Any], window: Window, work_area: Rect) -> str | None:
    """Why `window` is not where the start state's entry says the app opens; None if it is."""
    frame, state = window.frame, entry["state"]
    if state == "maximized":
        if window.maximized and frame == work_area:
            return None
        return f"{window}; want maximized, frame = work area {work_area}"
    if window.maximized:
        return f"{window}; want {state}, not maximized"
    if state == "centered":
        # Centres, not corners: an app may resize itself once placed, keeping its top left (VLC's
        # window loses 14 px of height after it maps), on the VM as here.
        dx = frame.x + frame.width / 2 - (work_area.x + work_area.width / 2)
        dy = frame.y + frame.height / 2 - (work_area.y + work_area.height / 2)
        if abs(dx) <= CENTRE_SLACK and abs(dy) <= CENTRE_SLACK:
            return None
        return f"{window}; want centred in {work_area}: its centre is {dx:+.0f},{dy:+.0f} off"
    if state == "placed":
        at, size = tuple(entry["at"]), tuple(entry["size"])
        if (frame.x, frame.y) == at and (window.client.width, window.client.height) == size:
            return None
        return f"{window}; want frame at {at[0]},{at[1]}, window {size[0]}x{size[1]}"
    raise ValueError(f"[[window]] {entry['app']}: unknown state {state!r}")


def where(screen: Screen, entry: Mapping[str, Any]) -> tuple[Window | None, str | None]:
    """The app's first window and why it is not where it should be (None if it is); no window
    yet gives (None, a reason)."""
    found = app_windows(screen, entry)
    if not found:
        shown = ", ".join(str(w) for w in screen.windows) or "none"
        return None, f"no {entry['wm_class']} window; windows: {shown}"
    return found[0], mismatch(entry, found[0], screen.work_area)


def wait_where(
    read: Callable[[], str], entry: Mapping[str, Any], limit: float, poll: float = 0.5
) -> Window:
    """Reads the desktop (read() runs SCRIPT there) until the app's first window is where the
    entry says, and returns it; fails naming where it was instead after `limit` seconds."""
    deadline = time.monotonic() + limit
    while True:
        window, wrong = where(parse(read()), entry)
        if window is not None and wrong is None:
            return window
        if time.monotonic() > deadline:
            raise AssertionError(f"{entry['app']} after {limit:g} s: {wrong}")
        time.sleep(poll)  # polling the window manager's state: X has no event to wait on here


def output_dir(kind: str) -> Path:
    """Where the tests put each app's first frame: $KUBECUA_TEST_OUTPUT/first-frames/KIND, else
    the same under the temp directory."""
    root = os.environ.get("KUBECUA_TEST_OUTPUT") or str(
        Path(tempfile.gettempdir()) / "kubecua-test-output"
    )
    folder = Path(root) / "first-frames" / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _changed_share(a: bytes, b: bytes) -> float:
    """The share of pixels that differ between two screenshots."""
    one, two = (Image.open(io.BytesIO(x)).convert("L") for x in (a, b))
    if one.size != two.size:
        return 1.0
    diff = ImageChops.difference(one, two).point(lambda v: 255 if v else 0)
    return diff.histogram()[255] / (one.width * one.height)


def painted(grab: Callable[[], bytes], limit: float = 30.0, still: float = 0.002) -> bytes:
    """The app's first frame as a user sees it: screenshots (grab()) a second apart until one
    differs from the last in under `still` of its pixels (a blinking caret is allowed), or the
    last one after `limit` seconds. A window the manager has placed may not be drawn yet."""
    deadline = time.monotonic() + limit
    last = grab()
    while time.monotonic() < deadline:
        time.sleep(1.0)  # the interval between the two frames compared
        shot = grab()
        if _changed_share(last, shot) < still:
            return shot
        last = shot
    return last
