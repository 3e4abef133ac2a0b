"""Screenshots: decode what the episode server sent and resize it to what the model sees.

The resize is the policy's (tokens.fit_image: the run's pixel cap, sides on multiples of the vision
patch factor), so the processor does not resize it again and the model's coordinates map back
exactly by (sx, sy)."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image


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
