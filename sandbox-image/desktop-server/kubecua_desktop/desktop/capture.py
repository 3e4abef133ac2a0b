"""X11 screen capture: mss's XCB backend plus the XFixes cursor, pasted with PIL.

mss 10.2's default backend reads the screen with XShmGetImage into one memfd segment, made once
per connection and reused (~1 ms at 1920x1080, against ~11 ms for 10.1's XGetImage through
Xlib). Where MIT-SHM cannot work (a remote display, an X server without the extension) mss falls
back to plain XGetImage by itself; we log which one runs, once. One connection per Grabber,
under a lock: captures are serial on the X server anyway, and per-thread connections would
each hold a screen-sized buffer.
"""

from __future__ import annotations

import logging
import threading

import mss
from mss.exception import ScreenShotError
from PIL import Image

from kubecua_desktop.desktop.base import DesktopUnavailable

log = logging.getLogger(__name__)
# Pillow frees an image's memory block back to the OS by default, so every 8 MB frame faulted
# its pages in anew: ~4000 page faults, 10-20 ms a screenshot on a loaded 2-core host. Keeping
# a few freed blocks (Pillow's PILLOW_BLOCKS_MAX) makes frames reuse them: ~2.5 ms all told.
BLOCKS_KEPT = 4
BACKENDS = ("default", "xgetimage")  # default: XShmGetImage, falling back to XGetImage


class Grabber:
    def __init__(self, backend: str = "default", display: str | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"capture backend must be one of {BACKENDS}, not {backend!r}")
        self.backend, self.display = backend, display
        self._lock = threading.Lock()
        self._mss: mss.MSS | None = None
        self._cursor = True  # until XFixes turns out to be missing
        self._logged = False
        if Image.core.get_blocks_max() < BLOCKS_KEPT:
            Image.core.set_blocks_max(BLOCKS_KEPT)

    def _open(self) -> mss.MSS:
        if self._mss is None:
            try:
                self._mss = mss.MSS(backend=self.backend, display=self.display)
            except Exception as exc:  # mss raises ScreenShotError, ctypes OSError, ...
                raise DesktopUnavailable(f"cannot capture the screen: {exc}") from exc
        return self._mss

    @property
    def uses_shm(self) -> bool:
        """Whether the last capture went through MIT-SHM (mss 10.2, pinned: its shm_status)."""
        status = getattr(self._mss and self._mss._impl, "shm_status", None)
        return status is not None and status.name == "AVAILABLE"

    def _grab(self) -> tuple[mss.screenshot.ScreenShot, mss.screenshot.ScreenShot | None]:
        grabber = self._open()
        try:
            shot = grabber.grab(grabber.monitors[0])
        except ScreenShotError:
            # The screen was resized (mss sized its buffer and monitors at connect): reconnect.
            self.close()
            grabber = self._open()
            shot = grabber.grab(grabber.monitors[0])
        cursor = None
        if self._cursor:
            try:
                cursor = grabber._impl.cursor()  # mss 10.2 (pinned): BGRA, straight alpha
            except ScreenShotError:
                self._cursor = False
                log.warning("no XFixes on this display: screenshots leave the cursor out")
        if not self._logged:
            self._logged = True
            fell_back = self.backend == "default" and not self.uses_shm
            notes = "; ".join(grabber.performance_status) or "XGetImage"
            (log.warning if fell_back else log.info)("screen capture: %s", notes)
        return shot, cursor

    def screenshot(self) -> Image.Image:
        with self._lock:
            try:
                shot, cursor = self._grab()
            except ScreenShotError as exc:
                self.close()
                raise DesktopUnavailable(f"cannot capture the screen: {exc}") from exc
        # shot.raw, not shot.bgra: bgra copies the whole frame into fresh bytes first.
        image = Image.frombytes("RGB", shot.size, shot.raw, "raw", "BGRX")
        if cursor is not None:
            sprite = Image.frombytes("RGBA", cursor.size, cursor.raw, "raw", "BGRA")
            image.paste(sprite, (cursor.left - shot.left, cursor.top - shot.top), sprite)
        return image

    def close(self) -> None:
        if self._mss is not None:
            self._mss.close()
            self._mss = None
