"""Screen capture (desktop/capture.py) on real X servers: MIT-SHM, its fallback, no leaks."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from kubecua_desktop.desktop.capture import Grabber
from tests.conftest import HEIGHT, WIDTH, Desktop, wait_for


@pytest.fixture
def desktop_env(desktop: Desktop, monkeypatch: pytest.MonkeyPatch) -> Desktop:
    for name in ("DISPLAY", "XAUTHORITY"):
        monkeypatch.setenv(name, desktop.info.env[name])
    return desktop


def bare_xvfb(*extra: str) -> Iterator[tuple[str, int]]:
    """A bare Xvfb (no window manager, black screen): its display and pid."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb missing: run `make setup-apt`")
    read, write = os.pipe()
    argv = ["Xvfb", "-displayfd", str(write), "-screen", "0", "640x480x24", "-nolisten", "tcp"]
    proc = subprocess.Popen([*argv, *extra], pass_fds=[write], stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as ready:
        number = ready.readline().strip()  # Xvfb writes it once it accepts connections
    assert number, "Xvfb exited before it was ready"
    try:
        yield f":{number}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def xvfb() -> Iterator[tuple[str, int]]:
    yield from bare_xvfb()


@pytest.fixture
def xvfb_without_shm() -> Iterator[tuple[str, int]]:
    yield from bare_xvfb("-extension", "MIT-SHM")


def pixels(image: Image.Image) -> bytes:
    return image.tobytes()


def test_shm_capture_equals_xgetimage_pixel_for_pixel(desktop_env: Desktop) -> None:
    shm, plain = Grabber(), Grabber("xgetimage")

    def agreeing() -> bytes | None:
        # Between two MIT-SHM grabs that agree, the screen held still (no caret blink, no
        # animation): the XGetImage grab taken between them must then show the same pixels.
        first, middle, last = shm.screenshot(), plain.screenshot(), shm.screenshot()
        if pixels(first) != pixels(last):
            return None
        assert pixels(middle) == pixels(first)
        return pixels(first)

    frame = wait_for(agreeing, 30, "a still screen")
    assert len(frame) == WIDTH * HEIGHT * 3
    assert shm.uses_shm
    assert not plain.uses_shm
    assert len(set(frame[::3001])) > 1  # a real desktop, not one flat colour


def test_fallback_when_the_server_has_no_mit_shm(
    xvfb_without_shm: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    display, _ = xvfb_without_shm
    grabber = Grabber(display=display)
    with caplog.at_level(logging.INFO, logger="kubecua_desktop.desktop.capture"):
        images = [grabber.screenshot() for _ in range(3)]
    assert not grabber.uses_shm
    assert {i.size for i in images} == {(640, 480)}
    assert pixels(images[0]) == pixels(Grabber("xgetimage", display).screenshot())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["screen capture: MIT-SHM extension not present"]  # logged once


def test_shm_state_is_one_segment_freed_on_close(xvfb: tuple[str, int]) -> None:
    """mss keeps one memfd segment per connection (none of SysV's); closing frees both ends."""
    display, server_pid = xvfb

    def segments(pid: int | str) -> int:
        return Path(f"/proc/{pid}/maps").read_text().count("mss-shm-buf")

    grabber = Grabber(display=display)
    threads = [threading.Thread(target=grabber.screenshot) for _ in range(4)]
    for _ in range(10):
        grabber.screenshot()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert grabber.uses_shm
    assert segments("self") == 1
    assert segments(server_pid) == 1
    grabber.close()
    assert segments("self") == 0
    wait_for(lambda: segments(server_pid) == 0, 10, "the X server to drop the segment")
    header, *rows = Path("/proc/sysvipc/shm").read_text().splitlines()
    creator = header.split().index("cpid")
    assert [r for r in rows if r.split()[creator] == str(os.getpid())] == []  # no SysV segments


def test_bare_display_capture_draws_the_cursor(xvfb: tuple[str, int]) -> None:
    display, _ = xvfb
    image = Grabber(display=display).screenshot()
    # A bare Xvfb: black root window, and its default cursor (a black and white X) in the middle.
    assert image.size == (640, 480)
    assert image.getpixel((0, 0)) == (0, 0, 0)
    assert len(set(image.crop((300, 220, 340, 260)).tobytes())) > 1
