"""Bearer tokens on every route, and 4xx answers (never a crash) for malformed requests."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Desktop


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/screenshot"), ("POST", "/execute"), ("POST", "/file"), ("GET", "/accessibility")],
)
def test_missing_token_is_401(strict_url: str, method: str, path: str) -> None:
    response = httpx.request(method, strict_url + path, timeout=10)
    assert response.status_code == 401
    assert "bearer token" in response.json()["detail"]
    assert response.headers["www-authenticate"] == "Bearer"


def test_wrong_token_is_401_and_right_token_works(strict_url: str, desktop: Desktop) -> None:
    wrong = httpx.get(strict_url + "/platform", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = httpx.get(
        strict_url + "/platform", headers={"Authorization": f"Bearer {desktop.token}"}
    )
    assert (right.status_code, right.text) == (200, "Linux")


def test_loopback_is_trusted_only_when_configured(desktop: Desktop) -> None:
    # The fixture session runs with trust_loopback, so a bare request from 127.0.0.1 passes.
    assert httpx.get(desktop.info.url + "/platform").status_code == 200


def test_malformed_json_is_422(desktop: Desktop) -> None:
    response = desktop.client.post(
        "/execute", content=b'{"command": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/execute", {}),
        ("/execute", {"command": []}),
        ("/execute", {"command": 42}),
        ("/run_python", {"code": ""}),
        ("/run_bash_script", {"script": "true", "timeout": -1}),
        ("/setup/download_file", {"url": "file:///etc/passwd", "path": "/tmp/x"}),
        ("/setup/activate_window", {"strict": True}),
    ],
)
def test_invalid_bodies_are_422(desktop: Desktop, path: str, body: dict[str, object]) -> None:
    response = desktop.client.post(path, json=body)
    assert response.status_code == 422, response.text


def test_unknown_executable_is_400_and_server_survives(desktop: Desktop) -> None:
    response = desktop.client.post("/execute", json={"command": ["no-such-binary-kubecua"]})
    assert response.status_code == 400
    assert "cannot start command" in response.json()["detail"]
    assert desktop.client.get("/platform").status_code == 200
