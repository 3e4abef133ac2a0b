"""Deterministic synthetic screenshots for tests (no desktop needed)."""

from __future__ import annotations

from PIL import Image


def screenshot(seed: int, size: tuple[int, int] = (160, 100)) -> Image.Image:
    """A deterministic, non-uniform RGB image; different seeds give different pixels."""
    img = Image.new("RGB", size, (seed * 37 % 256, seed * 91 % 256, 120))
    for x in range(0, size[0], 7):
        img.putpixel((x, (x * 3 + seed) % size[1]), (255, 255, 255))
    return img
