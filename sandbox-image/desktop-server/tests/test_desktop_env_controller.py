"""desktop-env's own PythonController (PyPI desktop-env 1.0.2, unchanged) against our server.

Only the controller module is installed (its heavy declared dependencies are dropped in
pyproject's dependency-metadata). It sends no Authorization header, so it reaches the session
through the loopback trust the fixture enables. SetupController is not imported here: its module
imports playwright and pydrive at import time; its upload request is reproduced in test_files.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from urllib.parse import urlparse

import pytest
from PIL import Image

from tests.conftest import HEIGHT, WIDTH, Desktop

python_controller = pytest.importorskip(
    "desktop_env.controllers.python", reason="desktop-env is in the dev group: run uv sync"
)


@pytest.fixture(scope="module")
def controller(desktop: Desktop) -> object:
    url = urlparse(desktop.info.url)
    return python_controller.PythonController(vm_ip=url.hostname, server_port=url.port)


def test_controller_screenshot_and_sizes(controller: object, desktop: Desktop) -> None:
    png = controller.get_screenshot()  # type: ignore[attr-defined]
    assert Image.open(io.BytesIO(png)).size == (WIDTH, HEIGHT)
    assert controller.get_vm_screen_size() == {"width": WIDTH, "height": HEIGHT}  # type: ignore[attr-defined]
    assert controller.get_vm_platform() == "Linux"  # type: ignore[attr-defined]
    desktop_dir = str(desktop.home / "Desktop")
    assert controller.get_vm_desktop_path() == desktop_dir  # type: ignore[attr-defined]


def test_controller_actions_move_the_real_pointer(controller: object, desktop: Desktop) -> None:
    controller.execute_action({"action_type": "MOVE_TO", "parameters": {"x": 321, "y": 123}})  # type: ignore[attr-defined]
    assert desktop.client.get("/cursor_position").json() == [321, 123]
    result = controller.execute_python_command("print(pyautogui.position())")  # type: ignore[attr-defined]
    assert result["output"].strip() == "Point(x=321, y=123)"


def test_controller_files_and_scripts(controller: object, desktop: Desktop) -> None:
    (desktop.home / "Documents" / "report.txt").write_text("quarterly numbers")
    assert controller.get_file(str(desktop.home / "Documents/report.txt")) == b"quarterly numbers"  # type: ignore[attr-defined]
    tree = controller.get_vm_directory_tree(str(desktop.home / "Documents"))  # type: ignore[attr-defined]
    assert {"type": "file", "name": "report.txt"} in tree["children"]
    bash = controller.run_bash_script("echo $((2**10))", timeout=10)  # type: ignore[attr-defined]
    assert (bash["status"], bash["output"], bash["returncode"]) == ("success", "1024\n", 0)
    py = controller.run_python_script("print('py', 6 * 7)")  # type: ignore[attr-defined]
    assert (py["status"], py["output"]) == ("success", "py 42\n")


def test_controller_accessibility_and_wallpaper(controller: object) -> None:
    tree = controller.get_accessibility_tree()  # type: ignore[attr-defined]
    assert ET.fromstring(tree).tag == "desktop-frame"
    wallpaper = controller.get_vm_wallpaper()  # type: ignore[attr-defined]
    assert wallpaper[:8] == b"\x89PNG\r\n\x1a\n"
