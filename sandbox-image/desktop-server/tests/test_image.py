"""The sandbox image, run for real with podman: non-root, token enforced from outside, a desktop
that answers with pyautogui importable. Skipped unless the image has been built (`make images`)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import free_port, wait_for

IMAGE = "localhost/kubecua/sandbox:dev"
PODMAN = ["podman", "--runtime", "runc"]  # crun refuses this host's cgroup layout
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def _image_exists() -> bool:
    if shutil.which("podman") is None:
        return False
    return subprocess.run([*PODMAN, "image", "exists", IMAGE]).returncode == 0


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if not _image_exists():
        pytest.skip(f"{IMAGE} is not built: run `make images` (hack/build-images.sh sandbox)")
    secret_dir = tmp_path_factory.mktemp("secret")
    token = secrets.token_hex(16)
    (secret_dir / "token").write_text(token)
    # The container's user (uid 1000) must read it, as it reads a mounted Secret.
    secret_dir.chmod(0o755)
    (secret_dir / "token").chmod(0o644)
    port, name = free_port(), f"kubecua-desktop-test-{secrets.token_hex(4)}"
    run = [*PODMAN, "run", "-d", "--rm", "--name", name, *LIMITS, "-p", f"127.0.0.1:{port}:5000"]
    run += ["-v", f"{secret_dir}:/var/run/secrets/kubecua:ro", IMAGE]
    subprocess.run(run, check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, token
    finally:
        subprocess.run([*PODMAN, "rm", "-f", name], capture_output=True)


def _status(url: str, token: str) -> int | None:
    try:
        auth = {"Authorization": f"Bearer {token}"}
        return httpx.get(f"{url}/screenshot", headers=auth, timeout=10).status_code
    except httpx.HTTPError:
        return None


def test_image_serves_the_desktop_as_non_root_with_token(container: tuple[str, str]) -> None:
    url, token = container
    wait_for(lambda: _status(url, token) == 200, 120, "the container's desktop")
    # Through podman's port mapping the client is not loopback: the token is required.
    assert httpx.get(f"{url}/platform").status_code == 401
    auth = {"Authorization": f"Bearer {token}"}
    code = "import os, pyautogui; print(os.getuid(), tuple(pyautogui.size()))"
    body = httpx.post(f"{url}/run_python", json={"code": code}, headers=auth, timeout=60).json()
    assert (body["status"], body["output"]) == ("success", "1000 (1920, 1080)\n"), body
    probe = {"command": "test -S /run/user/1000/bus && command -v google-chrome", "shell": True}
    result = httpx.post(f"{url}/execute", json=probe, headers=auth, timeout=60).json()
    assert result["output"].strip() == "/run/user/1000/bin/google-chrome"
