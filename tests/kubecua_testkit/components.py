"""kubecua's own components as real processes, each from its own virtualenv, for
cross-component tests: the operator, local sandboxes (Xvfb desktop + episode server), and the
trainer. Each runs in its own environment because their dependency sets cannot share one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kubecua_testkit.tools import REPO

VENV_PYTHON = {
    "operator": REPO / "operator" / ".venv" / "bin" / "python",
    "trainer": REPO / "trainer" / ".venv" / "bin" / "python",
    "episode": REPO / "sandbox-image" / "episode-server" / ".venv" / "bin" / "python",
}
SANDBOX_LOCAL = (
    REPO / "sandbox-image" / "episode-server" / ".venv" / "bin" / "kubecua-sandbox-local"
)
# Settings that make the operator react in fractions of a second instead of production periods.
FAST_OPERATOR = {
    "KUBECUA_OPERATOR_RESYNC_SECONDS": "2",
    "KUBECUA_OPERATOR_POLL_SECONDS": "0.5",
    "KUBECUA_OPERATOR_POLL_TIMEOUT_SECONDS": "0.5",
    "KUBECUA_OPERATOR_FAILURE_BACKOFF_SECONDS": "1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `check` until truthy. Used only for HTTP readiness and process state, which push no
    events; Kubernetes state is waited on with watches (kubecua_testkit.wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Process:
    """A child process with its log file; stop() sends SIGTERM, then SIGKILL."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = REPO
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited; its log:\n{self.tail()}")
        return True

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def start_in_group(
    stack: ExitStack, args: list[Any], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a process in its own group; the stack stops that group (and only it) at the end."""
    out = log.open("wb")
    proc = subprocess.Popen(
        [str(a) for a in args], stdout=out, stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})}, start_new_session=True,
    )  # fmt: skip
    stack.callback(out.close)
    stack.callback(stop_group, proc)
    return proc


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_operator(kubeconfig: Path, logdir: Path) -> tuple[Process, int]:
    """The operator, cluster-wide; returns it and its metrics port once it is live."""
    health, metrics = free_port(), free_port()
    env = {
        **FAST_OPERATOR,
        "KUBECONFIG": str(kubeconfig),
        "KUBECUA_OPERATOR_METRICS_PORT": str(metrics),
        "KUBECUA_OPERATOR_METRICS_HOST": "127.0.0.1",
    }
    liveness = f"http://127.0.0.1:{health}/healthz"
    argv = [str(VENV_PYTHON["operator"]), "-m", "kubecua_operator", "--liveness", liveness]
    op = Process("operator", argv, logdir / "operator.log", env, REPO / "operator").start()
    wait_until(lambda: op.alive() and http_ok(liveness), 90, "operator liveness")
    return op, metrics


@dataclass
class LocalSandbox:
    process: Process
    url: str


def start_sandbox(workdir: Path, token_file: Path) -> LocalSandbox:
    """One real local sandbox: an Xvfb desktop session and its episode server."""
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {k: free_port() for k in ("episode", "desktop", "cdp", "vlc")}
    display = _free_display()
    argv = [
        str(SANDBOX_LOCAL), "--display", str(display), "--token-file", str(token_file),
        "--workdir", str(workdir), "--episode-port", str(ports["episode"]),
        "--desktop-port", str(ports["desktop"]), "--cdp-port", str(ports["cdp"]),
        "--vlc-port", str(ports["vlc"]),
    ]  # fmt: skip
    proc = Process(f"sandbox:{display}", argv, workdir / "launcher.log").start()
    return LocalSandbox(proc, f"http://127.0.0.1:{ports['episode']}")


def wait_sandboxes_ready(sandboxes: list[LocalSandbox], timeout: float = 180) -> None:
    for sb in sandboxes:
        ready = f"{sb.url}/readyz"

        def check(url: str = ready, proc: Process = sb.process) -> bool:
            return proc.alive() and http_ok(url)

        wait_until(check, timeout, ready)


def _free_display() -> int:
    """A display number with no X server lock and no socket, from :200 up."""
    for n in range(200, 400):
        lock, sock = Path(f"/tmp/.X{n}-lock"), Path(f"/tmp/.X11-unix/X{n}")
        if not lock.exists() and not sock.exists() and n not in _claimed:
            _claimed.add(n)
            return n
    raise RuntimeError("no free X display between :200 and :399")


_claimed: set[int] = set()
