"""Observations: adaptive settle detection and screenshot encoding.

Settling replaces OSWorld's fixed 2 s pause after every action: poll the screen until
`stable_frames` consecutive screenshots are byte-identical to the one before them (the desktop's
PNG encoder is deterministic) or differ only inside a box of at most `ignore_area_pixels` (a
blinking text cursor would otherwise keep every GUI step waiting for the cap), never before
`min_seconds`, never past `max_seconds`."""

from __future__ import annotations

import base64
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageChops

from kubecua_sandbox_client import Observation, ObservationOptions, SettleOptions

# Pillow hands a freed image's memory back to the OS, so every decoded 1920x1080 frame faults
# its ~6 MB in anew (thousands of page faults, ms each frame on a loaded host); keeping a few
# freed blocks lets the next frame reuse them (the desktop server does the same).
if Image.core.get_blocks_max() < 4:
    Image.core.set_blocks_max(4)


@dataclass
class Settled:
    png: bytes
    seconds: float
    frames: int
    stable: bool  # False when max_seconds ran out first


def changed_area(a: bytes, b: bytes) -> int:
    """Pixels in the smallest box around every pixel that differs between two PNG frames
    (0 when identical). A blinking 2x20 text cursor gives 40; a dialog opening, 10**5 or more.

    >>> img = Image.new("RGB", (64, 64)); one = io.BytesIO(); img.save(one, "PNG")
    >>> img.paste((255, 255, 255), (10, 10, 12, 30)); two = io.BytesIO(); img.save(two, "PNG")
    >>> changed_area(one.getvalue(), one.getvalue()), changed_area(one.getvalue(), two.getvalue())
    (0, 40)
    """
    if a == b:
        return 0
    ia, ib = Image.open(io.BytesIO(a)).convert("RGB"), Image.open(io.BytesIO(b)).convert("RGB")
    if ia.size != ib.size:
        return ia.width * ia.height
    box = ImageChops.difference(ia, ib).getbbox()
    return 0 if box is None else (box[2] - box[0]) * (box[3] - box[1])


def settle(grab: Callable[[], bytes], opts: SettleOptions) -> Settled:
    """Grab frames until the screen stops changing. With stable_frames=2 and an unchanging
    screen, 3 grabs suffice: frame 0, then two frames equal to their predecessor. A frame
    "equals" its predecessor when its changes fit in `ignore_area_pixels` (blinking cursors)."""
    start = time.monotonic()
    deadline = start + opts.max_seconds
    png = grab()
    last, same, frames = png, 0, 1
    while True:
        now = time.monotonic()
        if same >= opts.stable_frames and now - start >= opts.min_seconds:
            return Settled(png, now - start, frames, True)
        if now >= deadline:
            return Settled(png, now - start, frames, False)
        time.sleep(min(opts.interval_seconds, max(0.0, deadline - now)))
        png = grab()
        frames += 1
        quiet = changed_area(last, png) <= opts.ignore_area_pixels
        same = same + 1 if quiet else 0
        last = png


def fit_pixels(width: int, height: int, max_pixels: int | None) -> tuple[int, int]:
    """Largest size with the same aspect ratio and width*height <= max_pixels.

    >>> fit_pixels(1920, 1080, 1003520)
    (1335, 751)
    >>> fit_pixels(1280, 720, None), fit_pixels(1280, 720, 10**7)
    ((1280, 720), (1280, 720))
    """
    if max_pixels is None or width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def encode(png: bytes, opts: ObservationOptions) -> tuple[str, int, int]:
    """base64 of the screenshot in the requested format and size; PNG passes through untouched
    when no resize is needed (no decode, no re-encode)."""
    image: Image.Image = Image.open(io.BytesIO(png))
    size = fit_pixels(image.width, image.height, opts.max_pixels)
    if opts.format == "png" and size == image.size:
        return base64.b64encode(png).decode(), image.width, image.height
    image = image.convert("RGB")
    if size != image.size:
        image = image.resize(size, Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    if opts.format == "jpeg":
        image.save(buf, "JPEG", quality=opts.jpeg_quality)
    else:
        image.save(buf, "PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode(), image.width, image.height


def build_observation(
    png: bytes, opts: ObservationOptions, step: int, a11y: str | None, terminal: str | None
) -> Observation:
    data, width, height = encode(png, opts)
    return Observation(
        screenshot=data,
        format=opts.format,
        width=width,
        height=height,
        a11y_tree=a11y,
        terminal=terminal,
        step=step,
    )
