"""The offline screens (bench.learning.family.Family.screen) of colourkeys families with other
grids, rows, backgrounds and sequence lengths than the tuned ones (issue 41 item 5's untuned
families, sandbox-image/tasks/untuned_families.toml): fitted to the family's maxPixels as the
trainer fits a screenshot (Qwen2-VL's smart_resize), every cell is one image token showing the
square still to press, from the left of the family's row, or the background. The family.json
here is a minimal one written by the test; no generator, no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from bench.learning.family import load

SYMBOLS = [
    {"name": "cyan", "colour": "#20c8d8", "key": "c"},
    {"name": "orange", "colour": "#f08020", "key": "o"},
    {"name": "white", "colour": "#f4f4f4", "key": "w"},
]


def _rgb(colour: str) -> tuple[int, int, int]:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return r, g, b


# (cols, rows, row, background, maxPixels as the generator writes it: Layout.max_pixels)
LAYOUTS = [
    pytest.param(3, 2, 0, "#808080", 5600, id="tuned-3x2"),
    pytest.param(4, 2, 1, "#303030", 7056, id="4x2-row1"),
    pytest.param(5, 2, 1, "#204020", 11032, id="5x2-row1"),
    pytest.param(5, 3, 2, "#d0d0d0", 12544, id="5x3-row2"),
    pytest.param(6, 3, 1, "#405060", 15876, id="6x3-row1"),
]


@pytest.mark.parametrize(("cols", "rows", "row", "background", "max_pixels"), LAYOUTS)
def test_every_cell_is_one_token_of_its_square_or_the_background(
    tmp_path: Path, cols: int, rows: int, row: int, background: str, max_pixels: int
) -> None:
    layout = {"cols": cols, "rows": rows, "row": row, "background": background}
    meta = {"name": "t", "symbols": SYMBOLS, "layout": layout, "warmup": [],
            "rollout": {"maxPixels": max_pixels, "maxTurns": 3}}  # fmt: skip
    (tmp_path / "family.json").write_text(json.dumps(meta))
    fam = load(tmp_path)
    task = {"evaluator": {"expected": {"rules": {"expected": "cow"}}}}
    colours = {s["key"]: s["colour"] for s in SYMBOLS}
    for typed in range(4):  # after each key pressed, the rest move one cell left
        screen = fam.screen(task, typed)
        assert screen is not None
        assert screen.size == (1920, 1080)
        h, w = smart_resize(screen.height, screen.width, 28, 28 * 28, fam.max_pixels)
        assert (w, h) == (cols * 28, rows * 28)  # one image token a cell
        fitted = screen.resize((w, h))
        left = "cow"[typed:]
        for r in range(rows):
            for c in range(cols):
                want = colours[left[c]] if r == row and c < len(left) else background
                assert fitted.getpixel((14 + 28 * c, 14 + 28 * r)) == _rgb(want), (typed, r, c)
