"""A real app (gnome-terminal) on the desktop: AT-SPI tree, terminal text, window routes,
wallpaper. Runs in file order: the terminal opened first is closed by the last window test."""

from __future__ import annotations

import io
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest
from PIL import Image

from tests.conftest import Desktop, run, wait_for, window_titles

ST = "{https://accessibility.ubuntu.example.org/ns/state}"
CP = "{https://accessibility.ubuntu.example.org/ns/component}"


@pytest.fixture(scope="module")
def terminal(desktop: Desktop) -> Iterator[None]:
    if shutil.which("gnome-terminal") is None:
        pytest.skip("gnome-terminal is not installed: run `make setup-apt`")
    launched = desktop.client.post("/setup/launch", json={"command": ["gnome-terminal"]})
    assert launched.text == "gnome-terminal launched successfully"
    wait_for(lambda: "gnome-terminal-server" in window_titles(desktop), 60, "a terminal window")
    yield
    body = {"window_name": "Gnome-terminal", "by_class": True}
    desktop.client.post("/setup/close_window", json=body)  # already closed when tests passed


def _tree(desktop: Desktop) -> ET.Element:
    response = desktop.client.get("/accessibility")
    assert response.status_code == 200
    return ET.fromstring(response.json()["AT"])


def test_accessibility_tree_contains_the_open_window(desktop: Desktop, terminal: None) -> None:
    def terminal_frame() -> ET.Element | None:
        root = _tree(desktop)
        assert root.tag == "desktop-frame"
        return root.find("application[@name='gnome-terminal-server']/frame")

    frame = wait_for(terminal_frame, 30, "the terminal in the AT-SPI tree")
    assert frame.get(f"{ST}showing") == "true"
    x, y = eval(frame.get(f"{CP}screencoord", "None"))  # "(x, y)" as OSWorld writes it
    w, h = eval(frame.get(f"{CP}size", "None"))
    assert w > 100 and h > 100 and x >= 0 and y >= 0  # noqa: PT018


def test_terminal_returns_the_focused_terminal_text(desktop: Desktop, terminal: None) -> None:
    assert desktop.client.post(
        "/setup/activate_window", json={"window_name": "Terminal", "strict": True}
    ).status_code == 200  # fmt: skip
    run(desktop, ["xdotool", "type", "--delay", "20", "echo kubecua-$((40+2))\n"])

    def output() -> str | None:
        text = desktop.client.get("/terminal").json()["output"]
        return text if text and "kubecua-42" in text.split("\n", 1)[-1] else None

    text = wait_for(output, 30, "the echoed line in /terminal")
    assert "echo kubecua-$((40+2))" in text


def test_window_size_by_class(desktop: Desktop, terminal: None) -> None:
    response = desktop.client.post("/window_size", data={"app_class_name": "Gnome-terminal"})
    size = response.json()
    assert size["width"] > 100 and size["height"] > 100  # noqa: PT018
    missing = desktop.client.post("/window_size", data={"app_class_name": "no-such-class"})
    assert missing.status_code == 404


def test_unknown_window_is_404(desktop: Desktop) -> None:
    body = {"window_name": "no-such-window-kubecua"}
    assert desktop.client.post("/setup/activate_window", json=body).status_code == 404
    assert desktop.client.post("/setup/close_window", json=body).status_code == 404


def test_close_window_closes_it(desktop: Desktop, terminal: None) -> None:
    body = {"window_name": "Gnome-terminal", "by_class": True}
    assert desktop.client.post("/setup/close_window", json=body).status_code == 200
    wait_for(lambda: "gnome-terminal" not in window_titles(desktop), 30, "the terminal to close")


def test_change_wallpaper_paints_the_screen_and_is_served(desktop: Desktop) -> None:
    path = desktop.home / "red.png"
    Image.new("RGB", (64, 64), (200, 10, 10)).save(path)
    response = desktop.client.post("/setup/change_wallpaper", json={"path": "~/red.png"})
    assert response.status_code == 200, response.text
    assert desktop.client.post("/wallpaper").content == path.read_bytes()

    def corner_is_red() -> bool:
        shot = Image.open(io.BytesIO(desktop.client.get("/screenshot").content)).convert("RGB")
        return shot.getpixel((5, 5)) == (200, 10, 10)

    wait_for(corner_is_red, 10, "the red wallpaper on screen")


def test_change_wallpaper_to_missing_file_is_404(desktop: Desktop) -> None:
    response = desktop.client.post("/setup/change_wallpaper", json={"path": "~/nope.png"})
    assert response.status_code == 404


def test_open_file_by_app_name_waits_for_its_window(desktop: Desktop) -> None:
    if shutil.which("gedit") is None:
        pytest.skip("gedit is not installed: run `make setup-apt`")
    response = desktop.client.post("/setup/open_file", json={"path": "gedit"})
    assert response.text == "File opened and window activated successfully"
    assert "gedit" in window_titles(desktop).lower()
    body = {"window_name": "gedit", "by_class": True}
    desktop.client.post("/setup/close_window", json=body)
    wait_for(lambda: "gedit" not in window_titles(desktop).lower(), 30, "gedit to close")
