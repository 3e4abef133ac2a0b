"""The sandbox image for real (podman), in both run modes (docs/episode-api.md, "Run modes"):
- the full sandbox: the episode API through podman's port mapping starts an episode, steps,
  evaluates and releases, and a released sandbox is clean; every process is non-root;
- `episode-server` (the operator's kubevirt backend): a second container whose episode server
  drives the first container's desktop over podman's bridge, with the pool token, as it would a
  VM's; its reset closes the windows the episode opened.
- every app a task opens (osworld_start_state.toml, [[window]]) opens where OSWorld's VM opens it,
  one episode each, read back through the container's desktop server; each first frame is saved
  under $KUBECUA_TEST_OUTPUT/first-frames/container (the path is printed).
Skipped unless the image is built (`make test-sandbox-image` builds it first); marked `image`
and left out of `make test-episode` (a container takes about a minute on this machine)."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port
from window_kit import WINDOWS, DesktopReader, open_task

IMAGE = "localhost/kubecua/sandbox:dev"
SUITE = Path(__file__).resolve().parents[2] / "tasks"
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
def token_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    if not _image_exists():
        pytest.skip(f"{IMAGE} is not built: run `make test-sandbox-image` (builds it first)")
    secret_dir = tmp_path_factory.mktemp("secret")
    token = secrets.token_hex(16)
    (secret_dir / "token").write_text(token)
    secret_dir.chmod(0o755)  # uid 1000 in the container reads it, as it reads a mounted Secret
    (secret_dir / "token").chmod(0o644)
    return token, secret_dir


@contextlib.contextmanager
def _run(token_dir: tuple[str, Path], *args: str) -> Iterator[Container]:
    """podman run IMAGE *args (options before the image, command after), its :8000 published on
    loopback; yields once /readyz is 200; removes the container whatever happens."""
    token, secret_dir = token_dir
    opts, cmd = (list(args[: args.index(IMAGE)]), list(args[args.index(IMAGE) + 1 :]))
    port, name = free_port(), f"kubecua-episode-test-{secrets.token_hex(4)}"
    run = [*PODMAN, "run", "-d", "--rm", "--name", name, *LIMITS, "-p", f"127.0.0.1:{port}:8000"]
    run += ["-v", f"{secret_dir}:/var/run/secrets/kubecua:ro", *opts, IMAGE, *cmd]
    t0 = time.monotonic()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=120) as http:
        try:
            subprocess.run(run, check=True, capture_output=True)
            deadline = t0 + 180
            while not _ready(http):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"container not ready in 180 s:\n{_logs(name)[-3000:]}")
                time.sleep(0.2)  # polling /readyz, the readiness condition
            yield Container(name, http, time.monotonic() - t0)
        finally:
            subprocess.run([*PODMAN, "rm", "-f", "-t", "5", name], capture_output=True)


def _logs(name: str) -> str:
    out = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def container(token_dir: tuple[str, Path]) -> Iterator[Container]:
    with _run(token_dir, IMAGE) as c:
        yield c


def _episode(
    http: httpx.Client, actions: list[str], task: dict[str, Any] = TASK
) -> tuple[float, dict[str, Any]]:
    started = http.post("/episodes", json={"task": task, **FAST})
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


def _suite_scores(http: httpx.Client, path: Path) -> tuple[float, float, float]:
    task = json.loads(path.read_text())
    sols = json.loads(path.with_suffix(".solutions.json").read_text())
    scores = []
    for actions in (sols["reference"], [], sols["wrong"]):
        started = http.post("/episodes", json={"task": task, **FAST})
        assert started.status_code == 201, (task["id"], started.text[:500])
        eid = started.json()["episode_id"]
        for a in actions:
            step = http.post(f"/episodes/{eid}/step", json=a)
            assert step.status_code == 200, (task["id"], step.text[:500])
            assert "error" not in step.json()["info"], (task["id"], step.json()["info"])
        scores.append(http.post(f"/episodes/{eid}/evaluate").json()["score"])
        assert http.delete(f"/episodes/{eid}").json()["clean"] is True, task["id"]
    return scores[0], scores[1], scores[2]


def test_system_tasks_score_right_twice_in_a_row_as_the_desktop_user(
    container: Container,
) -> None:
    """As OSWorld's user (uid 1000, sudo with its password): sudo, VLC and GIMP config, sound
    volume, default video player, Chrome bookmarks, GNOME settings; each twice on one sandbox."""
    paths = sorted(SUITE.glob("system/*.json")) + sorted(SUITE.glob("settings/*.json"))
    paths = [p for p in paths if not p.name.endswith(".solutions.json")]
    assert len(paths) >= 8
    for _ in range(2):
        scores = {p.stem: _suite_scores(container.http, p) for p in paths}
        bad = {k: v for k, v in scores.items() if not (v[0] == 1.0 and v[1] == 0.0 and v[2] < 1)}
        assert not bad, f"(reference, no-op, wrong) scores off for: {bad}"


def test_every_process_in_the_container_is_non_root(container: Container) -> None:
    top = subprocess.run([*PODMAN, "top", container.name, "user", "args"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    rows = [line.split(None, 1) for line in top.stdout.splitlines()[1:] if line.strip()]
    assert any("kubecua_episode" in args for _, args in rows), top.stdout
    assert {user for user, _ in rows} == {"user"}, top.stdout


LEAK = "/opt/kubecua-leak"
LEAK_TASK: dict[str, Any] = {
    "id": "image-sudo-leak",
    "instruction": f"Create the folder {LEAK} (your password is 'password').",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "shell": True,
                   "command": f"test -d {LEAK} && echo yes || echo no"},
        "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
    },
}  # fmt: skip
# Outside the home, as root: a new folder in /opt and at the top of /, a new and an edited /etc
# file, a deleted one, files in /var/tmp, /dev/shm and root's home.
LEAK_WRITES = (
    f"mkdir -p {LEAK}/sub && touch /etc/kubecua-leak.conf && mkdir /data && "
    "echo 'edited by an episode' >> /etc/issue && rm /etc/issue.net && echo x > /var/tmp/x && "
    "echo x > /dev/shm/x && echo x > /root/x"
)
LEFT = [LEAK, "/etc/kubecua-leak.conf", "/data", "/var/tmp/x", "/dev/shm/x", "/root/x"]


def _as_root(container: Container, script: str) -> subprocess.CompletedProcess[str]:
    """Reads the container's files as root, from outside the sandbox."""
    return subprocess.run([*PODMAN, "exec", "-u", "0", container.name, "sh", "-c", script],
                          capture_output=True, text=True)  # fmt: skip


def _python_shell(script: str) -> str:
    return f"import subprocess; subprocess.run({script!r}, shell=True, check=True)"


def test_sudo_writes_outside_the_home_are_undone_in_the_container(container: Container) -> None:
    """podman lets sudo escalate (a pod does not): the episode server, uid 1000 like the
    account, undoes root's writes through the same sudo."""
    banners = "stat -c '%n %s %a %U %Y' /etc/issue /etc/issue.net; md5sum /etc/issue*"
    before = _as_root(container, banners).stdout
    sudo = _python_shell(f"echo password | sudo -S -p '' sh -c {LEAK_WRITES!r}")
    score, released = _episode(container.http, [sudo, "DONE"], LEAK_TASK)
    assert (score, released["clean"]) == (1.0, True), released
    assert _as_root(container, banners).stdout == before
    left = _as_root(container, "ls -d " + " ".join(LEFT))
    assert (left.returncode, left.stdout) == (2, ""), left
    print(f"image reset seconds: after the sudo writes {released['reset_seconds']}")
    score, released = _episode(container.http, [], LEAK_TASK)  # its no-op, on the same sandbox
    assert (score, released["clean"]) == (0.0, True), released
    print(f"image reset seconds: after its no-op {released['reset_seconds']}")


def test_without_privilege_escalation_the_accounts_own_writes_are_undone(
    token_dir: tuple[str, Path],
) -> None:
    """As in a pod (allowPrivilegeEscalation: false): sudo fails, and what uid 1000 writes
    outside the home and /tmp is removed by the server, of the same uid."""
    writes = "echo x > /var/tmp/x; echo x > /dev/shm/x; echo password | sudo -S true || true"
    with _run(token_dir, "--security-opt", "no-new-privileges", IMAGE) as c:
        score, released = _episode(c.http, [_python_shell(writes), "DONE"], LEAK_TASK)
        assert (score, released["clean"]) == (0.0, True), released
        left = _as_root(c, "ls -d /var/tmp/x /dev/shm/x")
        assert (left.returncode, left.stdout) == (2, ""), left
        assert "system_changed" in _logs(c.name)


# Remote mode: the setup clears the result itself (a remote home is not restored between
# episodes) and opens gedit, a window the release must close.
RESULT = "/home/user/remote.txt"
REMOTE_TASK: dict[str, Any] = {
    "id": "image-remote-write",
    "instruction": "Write done into ~/remote.txt",
    "config": [
        {"type": "execute", "parameters": {"command": f"rm -f {RESULT}", "shell": True}},
        {"type": "launch", "parameters": {"command": ["gedit", "--new-window"]}},
    ],
    "evaluator": {
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": f"cat {RESULT}", "shell": True},
        "expected": {"type": "rule", "rules": {"include": ["done"], "exclude": []}},
    },
}


def _windows(desktop: httpx.Client) -> set[str]:
    out = desktop.post("/execute", json={"command": ["wmctrl", "-l"]})
    assert out.status_code == 200, out.text
    return {line.split()[0] for line in out.json()["output"].splitlines() if line.strip()}


def _wait_for(condition: Any, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {limit} s waiting for {what}"
        time.sleep(0.2)  # polling the desktop's window list


def test_episode_server_mode_drives_another_containers_desktop(
    container: Container, token_dir: tuple[str, Path]
) -> None:
    ip = subprocess.run([*PODMAN, "inspect", "-f", "{{.NetworkSettings.IPAddress}}",
                         container.name], capture_output=True, text=True, check=True)  # fmt: skip
    host = ip.stdout.strip()
    assert host, "the full sandbox has no bridge address"
    env = {"KUBECUA_DESKTOP_URL": f"http://{host}:5000", "KUBECUA_CDP_URL": f"http://{host}:9222",
           "KUBECUA_VLC_URL": f"http://{host}:8080", "KUBECUA_DESKTOP_OS": "Ubuntu"}  # fmt: skip
    opts = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    auth = {"Authorization": f"Bearer {token_dir[0]}"}
    with (
        httpx.Client(base_url=f"http://{host}:5000", headers=auth, timeout=60) as desktop,
        _run(token_dir, *opts, IMAGE, "episode-server") as remote,
    ):
        assert httpx.get(f"http://{host}:5000/screenshot").status_code == 401  # token needed
        baseline = _windows(desktop)
        http = remote.http
        started = http.post("/episodes", json={"task": REMOTE_TASK, **FAST})
        assert started.status_code == 201, started.text
        eid = started.json()["episode_id"]
        _wait_for(lambda: _windows(desktop) - baseline, 30, "gedit's window")
        write = "import pathlib; (pathlib.Path.home() / 'remote.txt').write_text('done')"
        for action in (write, "DONE"):
            assert http.post(f"/episodes/{eid}/step", json={"action": action}).status_code == 200
        assert http.post(f"/episodes/{eid}/evaluate").json()["score"] == 1.0
        released = http.delete(f"/episodes/{eid}").json()
        assert released["clean"] is True, released
        assert _windows(desktop) == baseline  # the release closed gedit
        assert 0 < released["reset_seconds"] < 30
        # Doing nothing scores 0: the setup removed the previous episode's file.
        score, released = _episode(http, [], REMOTE_TASK)
        assert (score, released["clean"]) == (0.0, True)
        assert _windows(desktop) == baseline
        status = http.get("/status").json()
        assert (status["episodes_served"], status["ready"]) == (2, True), status
        assert "the home is not restored" in _logs(remote.name)
        top = subprocess.run([*PODMAN, "top", remote.name, "user", "args"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert "supervisord" not in top.stdout, top.stdout
        assert "kubecua_episode" in top.stdout, top.stdout


def test_episode_server_mode_names_a_bad_variable(token_dir: tuple[str, Path]) -> None:
    bad = [*PODMAN, "run", "--rm", *LIMITS, "-e", "KUBECUA_SANDBOX_TOKEN=t"]
    out = subprocess.run([*bad, IMAGE, "episode-server"], capture_output=True, text=True)
    assert (out.returncode, "KUBECUA_DESKTOP_URL" in out.stderr) == (2, True), out.stderr
    bad += ["-e", "KUBECUA_DESKTOP_URL=http://desk:5000", "-e", "KUBECUA_VLC_URL=http://vm:8080"]
    out = subprocess.run([*bad, IMAGE, "episode-server"], capture_output=True, text=True)
    assert (out.returncode, "KUBECUA_VLC_URL" in out.stderr) == (2, True), out.stderr
    echo = subprocess.run([*PODMAN, "run", "--rm", *LIMITS, IMAGE, "id", "-u"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert echo.stdout.strip() == "1000"  # any other command runs as given, non-root


def _bridge_address(name: str) -> str:
    ip = subprocess.run([*PODMAN, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name],
                        capture_output=True, text=True, check=True)  # fmt: skip
    assert ip.stdout.strip(), f"{name} has no bridge address"
    return ip.stdout.strip()


@pytest.mark.parametrize("app", [e["app"] for e in WINDOWS])
def test_each_app_opens_where_osworlds_vm_opens_it_in_the_container(
    container: Container, token_dir: tuple[str, Path], app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started by a task's own setup through the episode API (an episode each: every one after a
    reset), as the desktop user; read back through the desktop server with the pool token."""
    reader = DesktopReader(f"http://{_bridge_address(container.name)}:5000", token_dir[0])
    started = container.http.post("/episodes", json={"task": open_task(app), **FAST})
    assert started.status_code == 201, started.text
    eid = started.json()["episode_id"]
    try:
        path = reader.check(app, "container")
    finally:
        released = container.http.delete(f"/episodes/{eid}").json()
        reader.close()
    assert released["clean"] is True, released
    with capsys.disabled():
        print(f"\n{app}'s first frame in the container: {path}")
