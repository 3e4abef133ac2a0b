"""Start Xvfb on a free display with an MIT-MAGIC-COOKIE, so only holders of the session's
Xauthority file (its own processes) can connect, and python-xlib finds credentials."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from kubecua_desktop.session.procs import Child, SessionError, read_line_from_fd

FIRST_AUTO_DISPLAY = 10  # leave :0-:9 to real screens and hand-started servers
TRIES = 5


def free_displays() -> Iterator[int]:
    for number in range(FIRST_AUTO_DISPLAY, 1000):
        if not (
            Path(f"/tmp/.X{number}-lock").exists() or Path(f"/tmp/.X11-unix/X{number}").exists()
        ):
            yield number


def start_xvfb(
    spawn: Callable[[str, list[str], tuple[int, ...]], Child],
    display: int | None,
    geometry: str,
    xauthority: Path,
    timeout: float,
) -> str:
    """Start Xvfb (on display, or the first free one, retrying races); returns ':N' when ready."""
    candidates = [display] if display is not None else free_displays()
    last: SessionError | None = None
    for _, number in zip(range(TRIES), candidates, strict=False):
        cookie = secrets.token_hex(16)
        add = ["xauth", "-f", str(xauthority), "add", f":{number}", "MIT-MAGIC-COOKIE-1", cookie]
        subprocess.run(add, check=True, capture_output=True, timeout=10)
        read_fd, write_fd = os.pipe()
        # -noreset: by default X resets when its last client leaves, and a client connecting
        # during that reset (openbox right after at-spi's probe) fails.
        argv = ["Xvfb", f":{number}", "-screen", "0", geometry, "-nolisten", "tcp", "-noreset"]
        argv += ["-auth", str(xauthority), "-displayfd", str(write_fd)]
        xvfb = spawn("xvfb", argv, (write_fd,))
        os.close(write_fd)
        try:
            read_line_from_fd(read_fd, xvfb, timeout, "ready (-displayfd)")
            return f":{number}"
        except SessionError as exc:  # most often: another server took this display meanwhile
            last = exc
        finally:
            os.close(read_fd)
    raise last or SessionError("no free X display found")
