"""The live view (kubecua_desktop.liveview) in a real headless browser: Debian's Chromium opens
noVNC, served by websockify from the sandbox's own port, on the real desktop session (Xvfb)
through x11vnc.

- read-only (the default a pool gets): the page shows the desktop's pixels (a window of a known
  colour), and a click on it is refused: the window never sees it, while a later change of the
  desktop still reaches the page (the session is live, the click came first);
- interactive (a pool that asks for it): the same click reaches the window; so the refusal
  above is x11vnc's, not a click that got lost (noVNC is told view_only=0 in both);
- the WebSocket needs the pool's token (a wrong one gets no 101), and the token never appears
  in the live view's log.
About 20 s (two live views, two browsers) once the session's desktop runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser_pipe import CHROMIUM, Browser
from tests.conftest import HEIGHT, WIDTH, Desktop, free_port, wait_for

NOVNC = Path("/usr/share/novnc/vnc.html")
BLUE, RED, GREEN = (30, 144, 255), (255, 69, 0), (50, 205, 50)
# A borderless window over the whole screen: blue; red once clicked (and it says so in a file);
# green once the test touches the trigger file. Debian's python3 has tkinter (python3-tk).
WINDOW = """
import os, sys, tkinter
flag, trigger = sys.argv[1], sys.argv[2]
root = tkinter.Tk()
root.overrideredirect(True)
root.geometry(f"{root.winfo_screenwidth()}x{root.winfo_screenheight()}+0+0")
canvas = tkinter.Canvas(root, bg="#1e90ff", highlightthickness=0)
canvas.pack(fill="both", expand=True)
def clicked(_):
    canvas.configure(bg="#ff4500")
    open(flag, "w").write("clicked")
canvas.bind("<Button-1>", clicked)
def poll():
    if os.path.exists(trigger):
        canvas.configure(bg="#32cd32")
    root.after(50, poll)
poll()
root.mainloop()
"""
CANVAS = """(() => { const c = document.querySelector('canvas');
  if (!c || c.width < 100) return null;
  const d = c.getContext('2d').getImageData(c.width / 4, c.height / 4, 1, 1).data;
  const r = c.getBoundingClientRect();
  return {size: [c.width, c.height], rgb: [d[0], d[1], d[2]],
          centre: [r.left + r.width / 2, r.top + r.height / 2]}; })()"""

pytestmark = pytest.mark.timeout(180)


def _missing() -> list[str]:
    needed = {"x11vnc": shutil.which("x11vnc"), "websockify": shutil.which("websockify"),
              "novnc": NOVNC.exists() or None, "chromium": CHROMIUM.exists() or None}  # fmt: skip
    return [name for name, found in needed.items() if not found]


@pytest.fixture(scope="module", autouse=True)
def _needs_packages() -> None:
    if missing := _missing():
        pytest.skip(f"{', '.join(missing)} missing: `make setup-apt` (apt-packages.txt)")


def close(rgb: list[int], want: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 8 for a, b in zip(rgb, want, strict=True))


@contextlib.contextmanager
def live_view(desktop: Desktop, mode: str, log: Path) -> Iterator[str]:
    """The live view launcher as supervisord runs it, on the session's display; its URL."""
    port, env = free_port(), dict(desktop.info.env)
    env |= {"KUBECUA_LIVE_VIEW": mode, "KUBECUA_SANDBOX_TOKEN": desktop.token}
    argv = [sys.executable, "-m", "kubecua_desktop.liveview", "--display", env["DISPLAY"],
            "--xauthority", env["XAUTHORITY"], "--host", "127.0.0.1", "--port", str(port),
            "--vnc-port", str(free_port())]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is None and _serves(f"{url}/vnc.html"), 30,
                 "the live view to serve noVNC")  # fmt: skip
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _serves(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _handshake(port: int, token: str) -> str | None:
    """The status line websockify answers a WebSocket upgrade with; None if it closes."""
    request = (f"GET /websockify?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")  # fmt: skip
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(request.encode())
            line = s.makefile("rb").readline().decode().strip()
    except OSError:
        return None
    return line or None


@pytest.fixture
def window(desktop: Desktop, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The blue window, up and shown on the desktop; (its click flag, its green trigger)."""
    flag, trigger = tmp_path / "clicked", tmp_path / "green"
    proc = subprocess.Popen(["/usr/bin/python3", "-c", WINDOW, str(flag), str(trigger)],
                            env=desktop.info.env)  # fmt: skip
    try:
        wait_for(lambda: close(desktop_pixel(desktop), BLUE), 30, "the blue window")
        yield flag, trigger
    finally:
        proc.terminate()
        proc.wait(10)


def desktop_pixel(desktop: Desktop) -> list[int]:
    """A pixel of the desktop itself (the desktop server's screenshot), off the centre where the
    pointer is drawn."""
    from io import BytesIO

    from PIL import Image

    shot = desktop.client.get("/screenshot")
    image = Image.open(BytesIO(shot.content)).convert("RGB")
    return list(image.getpixel((image.width // 4, image.height // 4)))  # type: ignore[arg-type]


@contextlib.contextmanager
def browser_on(url: str, token: str, tmp_path: Path) -> Iterator[tuple[Browser, dict]]:
    """noVNC at `url`, told to send input (view_only=0): whether input counts is the server's
    call. Yields the browser once the canvas shows the desktop, with what it showed."""
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(f"{url}/vnc.html?autoconnect=1&resize=off&view_only=0"
                     f"&path=websockify%3Ftoken%3D{token}")  # fmt: skip
        shown = wait_for(lambda: _showing(browser, BLUE), 60, "noVNC to show the desktop")
        yield browser, shown
    finally:
        browser.close()


def _showing(browser: Browser, colour: tuple[int, int, int]) -> dict | None:
    canvas = browser.evaluate(CANVAS)
    return canvas if canvas and close(canvas["rgb"], colour) else None


def test_read_only_view_shows_the_desktop_and_refuses_a_click(desktop, window, tmp_path) -> None:
    flag, trigger = window
    log = tmp_path / "liveview.log"
    view = live_view(desktop, "viewOnly", log)
    with view as url, browser_on(url, desktop.token, tmp_path) as (browser, shown):
        assert shown["size"] == [WIDTH, HEIGHT]  # the whole desktop, pixel for pixel
        browser.click(*shown["centre"])
        trigger.touch()  # a change after the click: once the page shows it, the click is past
        wait_for(lambda: _showing(browser, GREEN), 30, "the page to show the window turn green")
        assert not flag.exists()  # the window never got the click
        assert close(desktop_pixel(desktop), GREEN)  # green (untouched), not red (clicked)
    text = log.read_text()
    assert desktop.token not in text
    assert "token=<redacted>" in text  # websockify logged the path: masked


def test_interactive_view_passes_the_same_click_to_the_desktop(desktop, window, tmp_path) -> None:
    flag, _ = window
    with (
        live_view(desktop, "interactive", tmp_path / "liveview.log") as url,
        browser_on(url, desktop.token, tmp_path) as (browser, shown),
    ):
        browser.click(*shown["centre"])
        wait_for(flag.exists, 30, "the window to get the click")
        wait_for(lambda: _showing(browser, RED), 30, "the page to show the clicked window")


def test_the_websocket_needs_the_pools_token(desktop, tmp_path) -> None:
    with live_view(desktop, "viewOnly", tmp_path / "liveview.log") as url:
        port = int(url.rsplit(":", 1)[1])
        assert _handshake(port, "not-the-token") is None  # closed: no upgrade
        assert _handshake(port, desktop.token) == "HTTP/1.1 101 Switching Protocols"


def test_live_view_is_off_unless_asked(desktop) -> None:
    env = {**os.environ, "KUBECUA_LIVE_VIEW": ""}
    done = subprocess.run([sys.executable, "-m", "kubecua_desktop.liveview"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0
    assert "live view off" in done.stderr
    bad = {**env, "KUBECUA_LIVE_VIEW": "yes"}
    refused = subprocess.run([sys.executable, "-m", "kubecua_desktop.liveview"], env=bad,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode != 0
    assert "viewOnly" in refused.stderr  # says what to write instead
