"""Screenshot capture and encode costs on a real X display; prints one JSON object.

    python -m kubecua_desktop.bench                 # starts its own 1920x1080 session
    python -m kubecua_desktop.bench --display :10   # measures an existing display
Reports median milliseconds over --repeat runs: capture (MIT-SHM, and the XGetImage fallback;
both with the cursor and the BGRX->RGB conversion), the encodings (ours, and Pillow's PNG as
OSWorld's anchor), capture plus PNG (the benchmark figure), and GET /screenshot end to end
against a server it starts on the display, next to a trivial GET /platform. Leaves out the
network (`make bench-sandbox` covers the whole step). `make bench-desktop` runs this.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from PIL import Image, ImageGrab

from kubecua_desktop.desktop.capture import Grabber
from kubecua_desktop.png import encode_png


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of fn in milliseconds, e.g. three runs of 1, 2, 9 ms give 2.0."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def pillow(image: Image.Image, fmt: str, **options: int) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def measure(repeat: int) -> dict[str, object]:
    grabber, fallback = Grabber(), Grabber("xgetimage")
    image = grabber.screenshot()
    encoders: dict[str, Callable[[], bytes]] = {
        "png": lambda: encode_png(image),
        "pillow_png_default": lambda: pillow(image, "PNG"),  # what OSWorld's server sends
        "jpeg_q90": lambda: pillow(image, "JPEG", quality=90),
    }
    result: dict[str, object] = {"width": image.width, "height": image.height, "repeat": repeat}
    result["capture_ms"] = median_ms(grabber.screenshot, repeat)
    result["capture_uses_mit_shm"] = grabber.uses_shm
    result["capture_xgetimage_ms"] = median_ms(fallback.screenshot, repeat)
    result["capture_imagegrab_ms"] = median_ms(lambda: ImageGrab.grab(xdisplay=None), repeat)
    for name, encoder in encoders.items():
        result[f"encode_{name}_bytes"] = len(encoder())
        result[f"encode_{name}_ms"] = median_ms(encoder, repeat)
    result["capture_encode_png_ms"] = median_ms(lambda: encode_png(grabber.screenshot()), repeat)
    result["resize_1280x720_ms"] = median_ms(lambda: image.resize((1280, 720)), repeat)
    return result


@contextmanager
def server() -> Iterator[httpx.Client]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "kubecua_desktop", "--port", str(port), "--trust-loopback"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get("/platform").raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            yield client
    finally:
        proc.terminate()
        proc.wait(10)


def measure_http(repeat: int) -> dict[str, object]:
    with server() as client:
        calls = {
            "platform": lambda: client.get("/platform"),
            "screenshot_png": lambda: client.get("/screenshot"),
            "screenshot_jpeg": lambda: client.get("/screenshot", params={"format": "jpeg"}),
        }
        for call in calls.values():
            call().raise_for_status()
        return {f"http_{name}_ms": median_ms(call, repeat) for name, call in calls.items()}


def measure_all(repeat: int) -> dict[str, object]:
    return measure(repeat) | measure_http(repeat) | {"loadavg_1m": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--display", help="measure this display instead of starting a session")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    if args.display:
        os.environ["DISPLAY"] = args.display
        print(json.dumps(measure_all(args.repeat)))
        return
    from kubecua_desktop.session.config import SessionConfig
    from kubecua_desktop.session.session import DesktopSession

    with tempfile.TemporaryDirectory() as home:
        session = DesktopSession(SessionConfig(port=0, home=Path(home), trust_loopback=True))
        session.start_display_only()
        try:
            os.environ.update(DISPLAY=session.env["DISPLAY"], XAUTHORITY=session.env["XAUTHORITY"])
            print(json.dumps(measure_all(args.repeat)))
        finally:
            session.stop()


if __name__ == "__main__":
    main()
