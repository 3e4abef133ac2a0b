"""Screen routes: screenshot pixels and format, sizes, cursor, platform, desktop path."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image, ImageChops

from kubecua_desktop.png import encode_png
from kubecua_desktop.session.session import is_black
from tests.conftest import HEIGHT, WIDTH, Desktop, run, wait_for


def test_screenshot_is_a_png_of_the_screen_and_not_black(desktop: Desktop) -> None:
    response = desktop.client.get("/screenshot")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(response.content))
    assert image.size == (WIDTH, HEIGHT)
    assert not is_black(response.content)


def test_screenshot_can_be_jpeg(desktop: Desktop) -> None:
    response = desktop.client.get("/screenshot", params={"format": "jpeg", "quality": 70})
    assert response.status_code == 200
    assert response.content[:3] == b"\xff\xd8\xff"
    assert Image.open(io.BytesIO(response.content)).size == (WIDTH, HEIGHT)


def test_screenshot_rejects_unknown_format(desktop: Desktop) -> None:
    assert desktop.client.get("/screenshot", params={"format": "gif"}).status_code == 422


def test_screen_size_matches_the_display(desktop: Desktop) -> None:
    assert desktop.client.post("/screen_size").json() == {"width": WIDTH, "height": HEIGHT}


def test_cursor_position_follows_pyautogui(desktop: Desktop) -> None:
    code = "import pyautogui; pyautogui.FAILSAFE = False; pyautogui.moveTo(123, 234)"
    assert run(desktop, ["python", "-c", code])["returncode"] == 0
    assert desktop.client.get("/cursor_position").json() == [123, 234]


def test_cursor_is_drawn_into_the_screenshot(desktop: Desktop) -> None:
    def crop_at(x: int, y: int) -> bytes:
        run(desktop, ["python", "-c", f"import pyautogui; pyautogui.moveTo({x}, {y})"])
        shot = Image.open(io.BytesIO(desktop.client.get("/screenshot").content))
        return shot.crop((300, 300, 340, 340)).tobytes()

    # The same 40x40 patch differs only by whether the cursor sits on it.
    assert crop_at(305, 305) != crop_at(900, 600)


def test_platform_is_linux_plain_text(desktop: Desktop) -> None:
    response = desktop.client.get("/platform")
    assert response.text == "Linux"


def test_desktop_path_is_home_desktop(desktop: Desktop) -> None:
    expected = str(desktop.home / "Desktop")
    assert desktop.client.post("/desktop_path").json() == {"desktop_path": expected}


@pytest.mark.parametrize("level", [0, 1, 2, 9])
def test_png_writer_is_lossless_and_deterministic(level: int) -> None:
    image = Image.effect_noise((97, 31), 64).convert("RGB")  # odd sizes, every byte value
    data = encode_png(image, level)
    assert Image.open(io.BytesIO(data)).tobytes() == image.tobytes()
    assert encode_png(image, level) == data


def test_still_screen_gives_equal_png_bytes(desktop: Desktop) -> None:
    """The episode server's settle detection compares screenshots byte for byte."""
    shot = lambda: desktop.client.get("/screenshot").content  # noqa: E731
    wait_for(lambda: shot() == shot(), 30, "two equal screenshots of a still screen")


def test_screenshot_cursor_matches_mss_own_blend(desktop: Desktop, tmp_path: Path) -> None:
    """We paste the cursor with PIL instead of mss's slow blend: same pixels (rounding aside)."""
    reference = tmp_path / "mss.png"
    code = (
        "import pyautogui, mss, mss.tools; pyautogui.FAILSAFE = False; pyautogui.moveTo(300, 200)\n"
        "g = mss.MSS(with_cursor=True); s = g.grab(g.monitors[0])\n"
        f"mss.tools.to_png(s.rgb, s.size, output={str(reference)!r})"
    )
    assert run(desktop, ["python3", "-c", code])["returncode"] == 0
    ours = Image.open(io.BytesIO(desktop.client.get("/screenshot").content)).convert("RGB")
    theirs = Image.open(reference).convert("RGB")
    box = (280, 180, 340, 240)  # around the cursor, which must be drawn
    assert ours.crop(box).tobytes() != Image.new("RGB", (60, 60), ours.getpixel((0, 719))).tobytes()
    diff = ImageChops.difference(ours, theirs)
    assert max(high for _, high in diff.getextrema()) <= 2
