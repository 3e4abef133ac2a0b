"""Screenshots: decode what the episode server sent and resize it to what the model sees.

The model's image is the screenshot scaled down to the run's pixel cap, with sides rounded down
to a multiple of the vision patch factor (patch size x merge size: 28 for Qwen2.5-VL), so the
processor does not resize it again and the model's coordinates map back exactly by (sx, sy).
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image


def model_image_size(width: int, height: int, max_pixels: int, factor: int = 28) -> tuple[int, int]:
    """Largest (w, h) with w*h <= max_pixels, the screen's aspect, and sides multiples of factor.

    >>> model_image_size(1920, 1080, 1003520)   # scale 0.696 -> 1335x751 -> floor to 28s
    (1316, 728)
    >>> model_image_size(200, 100, 1003520)      # small screens are only rounded to the factor
    (196, 84)
    """
    scale = min(1.0, math.sqrt(max_pixels / (width * height)))
    w = max(factor, int(width * scale) // factor * factor)
    h = max(factor, int(height * scale) // factor * factor)
    return w, h


@dataclass(frozen=True)
class Screen:
    image: Image.Image  # what the model sees
    screen_width: int  # what the desktop has
    screen_height: int
    encoded: bytes | None = None  # the desktop's own PNG/JPEG at full size (trajectory files)

    @property
    def scale(self) -> tuple[float, float]:
        """Multiply model-image coordinates by these to get screen coordinates."""
        return self.screen_width / self.image.width, self.screen_height / self.image.height


def decode_screen(b64: str, fit: Callable[[Image.Image], Image.Image]) -> Screen:
    """Decode a base64 PNG/JPEG and `fit` it for the model (CPU work: call in a thread).

    `fit` is tokens.fit_image bound to the policy, so the image is the one the model sees."""
    data = base64.b64decode(b64, validate=True)
    raw = Image.open(io.BytesIO(data))
    raw.load()
    return Screen(fit(raw.convert("RGB")), raw.width, raw.height, data)


def fit_to_cap(max_pixels: int, factor: int = 28) -> Callable[[Image.Image], Image.Image]:
    """A `fit` without a policy: model_image_size, then a bicubic resize."""

    def fit(img: Image.Image) -> Image.Image:
        size = model_image_size(img.width, img.height, max_pixels, factor)
        return img if size == img.size else img.resize(size, Image.Resampling.BICUBIC)

    return fit
