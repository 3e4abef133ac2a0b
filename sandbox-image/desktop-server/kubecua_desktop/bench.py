"""Screenshot capture and encode costs on a real X display; prints one JSON object.

    python -m kubecua_desktop.bench                 # starts its own 1920x1080 session
    python -m kubecua_desktop.bench --display :10   # measures an existing display
Reports the median milliseconds over --repeat runs for: capture with mss (with and without the
cursor) and with PIL ImageGrab; encoding as PNG (default level 6 and level 1) and JPEG q90;
resizing to 1280x720; and the size of each encoding. Leaves out network transfer (the episode
server's bench covers it). S2's `make bench-sandbox` calls this.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import mss
from PIL import Image, ImageGrab


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of fn in milliseconds, e.g. three runs of 1, 2, 9 ms give 2.0."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def encode(image: Image.Image, fmt: str, **options: int) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _encoder(image: Image.Image, fmt: str, options: dict[str, int]) -> Callable[[], bytes]:
    return lambda: encode(image, fmt, **options)


def measure(repeat: int) -> dict[str, object]:
    grabber = mss.mss(with_cursor=True)

    def grab() -> Image.Image:
        shot = grabber.grab(grabber.monitors[0])
        return Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX")

    image = grab()
    encodings: dict[str, tuple[str, dict[str, int]]] = {
        "png_default": ("PNG", {}),
        "png_level1": ("PNG", {"compress_level": 1}),
        "jpeg_q90": ("JPEG", {"quality": 90}),
    }
    result: dict[str, object] = {"width": image.width, "height": image.height, "repeat": repeat}
    result["capture_mss_with_cursor_ms"] = median_ms(grab, repeat)
    plain = mss.mss()
    result["capture_mss_no_cursor_ms"] = median_ms(lambda: plain.grab(plain.monitors[0]), repeat)
    result["capture_imagegrab_ms"] = median_ms(lambda: ImageGrab.grab(xdisplay=None), repeat)
    for name, (fmt, options) in encodings.items():
        result[f"encode_{name}_bytes"] = len(encode(image, fmt, **options))
        result[f"encode_{name}_ms"] = median_ms(_encoder(image, fmt, options), repeat)
    result["resize_1280x720_ms"] = median_ms(lambda: image.resize((1280, 720)), repeat)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--display", help="measure this display instead of starting a session")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    if args.display:
        os.environ["DISPLAY"] = args.display
        print(json.dumps(measure(args.repeat)))
        return
    from kubecua_desktop.session.session import DesktopSession, SessionConfig

    with tempfile.TemporaryDirectory() as home:
        session = DesktopSession(SessionConfig(port=0, home=Path(home), trust_loopback=True))
        session.start_display_only()
        try:
            os.environ.update(DISPLAY=session.env["DISPLAY"], XAUTHORITY=session.env["XAUTHORITY"])
            print(json.dumps(measure(args.repeat)))
        finally:
            session.stop()


if __name__ == "__main__":
    main()
