"""File routes: uploads the way SetupController sends them, downloads, trees, path safety."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from requests_toolbelt.multipart.encoder import MultipartEncoder

from tests.conftest import Desktop


def test_upload_then_file_round_trips_bytes(desktop: Desktop) -> None:
    payload = bytes(range(256)) * 1000
    target = desktop.home / "Documents" / "new" / "data.bin"
    # Exactly SetupController._upload_file_setup's request (requests + MultipartEncoder).
    form = MultipartEncoder({"file_path": str(target), "file_data": ("data.bin", payload)})
    response = requests.post(
        desktop.info.url + "/setup/upload",
        data=form,
        headers={"Content-Type": form.content_type, "Authorization": f"Bearer {desktop.token}"},
        timeout=30,
    )
    assert (response.status_code, response.text) == (200, f"File Uploaded: {len(payload)} bytes")
    assert target.read_bytes() == payload
    fetched = desktop.client.post("/file", data={"file_path": "~/Documents/new/data.bin"})
    assert fetched.status_code == 200
    assert fetched.content == payload


@pytest.mark.parametrize(
    ("file_path", "status"),
    [
        ("/etc/passwd", 403),
        ("~/../../../../etc/passwd", 403),
        ("/tmp/../etc/shadow", 403),
        ("relative/name.txt", 400),
        ("~/does-not-exist.txt", 404),
    ],
)
def test_file_path_safety(desktop: Desktop, file_path: str, status: int) -> None:
    response = desktop.client.post("/file", data={"file_path": file_path})
    assert response.status_code == status, response.text
    assert response.json()["detail"]


def test_symlink_out_of_the_roots_is_refused(desktop: Desktop) -> None:
    link = desktop.home / "sneaky"
    link.symlink_to("/etc")
    response = desktop.client.post("/file", data={"file_path": "~/sneaky/hostname"})
    assert response.status_code == 403


def test_upload_outside_roots_is_403(desktop: Desktop) -> None:
    files = {"file_data": ("x", b"x")}
    response = desktop.client.post("/setup/upload", data={"file_path": "/etc/x"}, files=files)
    assert response.status_code == 403
    assert not Path("/etc/x").exists()


def test_file_without_form_field_is_422(desktop: Desktop) -> None:
    assert desktop.client.post("/file").status_code == 422


def test_list_directory_returns_osworld_tree(desktop: Desktop) -> None:
    root = desktop.home / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    response = desktop.client.post("/list_directory", json={"path": str(root)})
    assert response.json() == {
        "directory_tree": {
            "type": "directory",
            "name": "tree",
            "children": [
                {"type": "file", "name": "a.txt"},
                {
                    "type": "directory",
                    "name": "sub",
                    "children": [{"type": "file", "name": "b.txt"}],
                },
            ],
        }
    }


def test_list_directory_of_a_file_is_400(desktop: Desktop) -> None:
    (desktop.home / "plain.txt").write_text("x")
    response = desktop.client.post("/list_directory", json={"path": "~/plain.txt"})
    assert response.status_code == 400


@pytest.fixture
def web_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server on loopback serving tmp_path (the sandbox has no internet)."""
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()


def test_download_file_fetches_into_the_desktop(
    desktop: Desktop, web_root: tuple[str, Path]
) -> None:
    url, root = web_root
    (root / "task.xlsx").write_bytes(b"PK\x03\x04fake-xlsx")
    body = {"url": f"{url}/task.xlsx", "path": "~/Desktop/task.xlsx"}
    response = desktop.client.post("/setup/download_file", json=body)
    assert response.text == "File downloaded successfully: 13 bytes"
    assert (desktop.home / "Desktop" / "task.xlsx").read_bytes() == b"PK\x03\x04fake-xlsx"


def test_download_of_a_missing_url_is_502(desktop: Desktop, web_root: tuple[str, Path]) -> None:
    url, _ = web_root
    body = {"url": f"{url}/missing", "path": "~/Desktop/missing"}
    response = desktop.client.post("/setup/download_file", json=body)
    assert response.status_code == 502
    assert "404" in response.json()["detail"]
