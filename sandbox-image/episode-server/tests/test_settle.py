"""Settle detection on frame sequences shaped like real desktops: a blinking text cursor (a 2x20
box toggling forever) counts as settled; a window still drawing does not; the cap always holds."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterator

from PIL import Image

from kubecua_episode.observe import changed_area, settle
from kubecua_sandbox_client import SettleOptions


def _png(boxes: list[tuple[int, int, int, int]]) -> bytes:
    img = Image.new("RGB", (320, 180), (40, 40, 60))
    for box in boxes:
        img.paste((255, 255, 255), box)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


CURSOR_ON, CURSOR_OFF = _png([(100, 50, 102, 70)]), _png([])


def _frames(seq: Iterator[bytes]) -> Callable[[], bytes]:
    return lambda: next(seq)


def test_blinking_cursor_settles_before_the_cap() -> None:
    opts = SettleOptions(min_seconds=0.0, max_seconds=2.0, stable_frames=2, interval_seconds=0.01)
    out = settle(_frames(itertools.cycle([CURSOR_ON, CURSOR_OFF])), opts)
    assert out.stable
    assert out.frames == 3  # first frame, then two "equal" ones: the cursor box is 40 pixels
    assert out.seconds < 1.0


def test_zero_tolerance_waits_out_a_blinking_cursor_until_the_cap() -> None:
    opts = SettleOptions(
        min_seconds=0.0, max_seconds=0.3, stable_frames=2, interval_seconds=0.01,
        ignore_area_pixels=0,
    )  # fmt: skip
    out = settle(_frames(itertools.cycle([CURSOR_ON, CURSOR_OFF])), opts)
    assert not out.stable
    assert out.seconds >= 0.3


def test_a_growing_window_is_not_settled_until_it_stops() -> None:
    # A 40x40 window growing by 10 px per frame for 6 frames, then still.
    growing = [_png([(0, 0, 40 + 10 * i, 40 + 10 * i)]) for i in range(6)]
    seq = itertools.chain(growing, itertools.repeat(growing[-1]))
    opts = SettleOptions(min_seconds=0.0, max_seconds=5.0, stable_frames=2, interval_seconds=0.01)
    out = settle(_frames(seq), opts)
    assert out.stable
    assert out.frames == 8  # six changing frames, then two unchanged ones
    assert out.png == growing[-1]


def test_changed_area_is_the_bounding_box_of_all_changes() -> None:
    two_far_apart = _png([(0, 0, 1, 1), (99, 49, 100, 50)])
    assert changed_area(CURSOR_OFF, CURSOR_OFF) == 0
    assert changed_area(CURSOR_OFF, CURSOR_ON) == 2 * 20
    assert changed_area(CURSOR_OFF, two_far_apart) == 100 * 50  # two dots, one big box
