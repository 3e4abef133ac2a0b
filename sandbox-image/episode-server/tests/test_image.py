"""The sandbox image for real (podman): the episode API through podman's port mapping starts an
episode, steps, evaluates and releases, and a released sandbox is clean. Every process in the
container is non-root. Skipped unless the image is built (`make test-sandbox-image` builds it
first); marked `image` and left out of `make test-episode` (the container takes a minute)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from conftest import free_port

IMAGE = "localhost/kubecua/sandbox:dev"
PODMAN = ["podman", "--runtime", "runc"]  # crun refuses this host's cgroup layout
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
pytestmark = pytest.mark.image

SETUP = {"command": "echo start > /home/user/input.txt", "shell": True}
CHECK = {"type": "vm_command_line", "command": "cat /home/user/result.txt", "shell": True}
TASK: dict[str, Any] = {
    "id": "image-write",
    "instruction": "Write done into ~/result.txt",
    "config": [{"type": "execute", "parameters": SETUP}],
    "evaluator": {
        "func": "check_include_exclude",
        "result": CHECK,
        "expected": {"type": "rule", "rules": {"include": ["done"], "exclude": []}},
    },
}
FAST = {"observation": {"format": "jpeg", "max_pixels": 640 * 360}, "settle": {"max_seconds": 1.0}}


@dataclass
class Container:
    name: str
    http: httpx.Client
    cold_start_seconds: float


def _image_exists() -> bool:
    if shutil.which("podman") is None:
        return False
    return subprocess.run([*PODMAN, "image", "exists", IMAGE]).returncode == 0


def _ready(http: httpx.Client) -> bool:
    try:
        return http.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    if not _image_exists():
        pytest.skip(f"{IMAGE} is not built: run `make test-sandbox-image` (builds it first)")
    secret_dir = tmp_path_factory.mktemp("secret")
    token = secrets.token_hex(16)
    (secret_dir / "token").write_text(token)
    secret_dir.chmod(0o755)  # uid 1000 in the container reads it, as it reads a mounted Secret
    (secret_dir / "token").chmod(0o644)
    port, name = free_port(), f"kubecua-episode-test-{secrets.token_hex(4)}"
    run = [*PODMAN, "run", "-d", "--rm", "--name", name, *LIMITS, "-p", f"127.0.0.1:{port}:8000"]
    run += ["-v", f"{secret_dir}:/var/run/secrets/kubecua:ro", IMAGE]
    t0 = time.monotonic()
    subprocess.run(run, check=True, capture_output=True)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=120) as http:
        try:
            deadline = t0 + 180
            while not _ready(http):
                if time.monotonic() > deadline:
                    logs = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
                    raise TimeoutError(f"container not ready in 180 s:\n{logs.stdout[-3000:]}")
                time.sleep(0.2)
            yield Container(name, http, time.monotonic() - t0)
        finally:
            subprocess.run([*PODMAN, "rm", "-f", "-t", "5", name], capture_output=True)


def _episode(http: httpx.Client, actions: list[str]) -> tuple[float, dict[str, Any]]:
    started = http.post("/episodes", json={"task": TASK, **FAST})
    assert started.status_code == 201, started.text
    eid = started.json()["episode_id"]
    for action in actions:
        step = http.post(f"/episodes/{eid}/step", json={"action": action})
        assert step.status_code == 200, step.text
        assert "error" not in step.json()["info"], step.json()["info"]
    score = http.post(f"/episodes/{eid}/evaluate").json()["score"]
    released = http.delete(f"/episodes/{eid}").json()
    return score, released


def test_episode_round_trip_through_podman_port_mapping(container: Container) -> None:
    http = container.http
    assert container.cold_start_seconds < 180
    assert httpx.get(str(http.base_url) + "/status").status_code == 401  # no token
    write = "import pathlib; (pathlib.Path.home() / 'result.txt').write_text('done')"
    score, released = _episode(http, [write, "DONE"])
    assert score == 1.0
    assert released["clean"] is True
    # The home was restored: result.txt is gone, so doing nothing now scores 0.
    score, released = _episode(http, [])
    assert (score, released["clean"]) == (0.0, True)
    assert http.get("/readyz").status_code == 200
    metrics = httpx.get(str(http.base_url) + "/metrics").text
    assert 'kubecua_sandbox_episodes_total{outcome="success"} 1.0' in metrics


def test_every_process_in_the_container_is_non_root(container: Container) -> None:
    top = subprocess.run([*PODMAN, "top", container.name, "user", "args"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    rows = [line.split(None, 1) for line in top.stdout.splitlines()[1:] if line.strip()]
    assert any("kubecua_episode" in args for _, args in rows), top.stdout
    assert {user for user, _ in rows} == {"user"}, top.stdout
