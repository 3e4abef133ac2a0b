"""Start N local sandboxes (Xvfb desktops + episode servers) and stop them on exit.

Each sandbox is one `kubecua-sandbox-local` process from sandbox-image/episode-server's venv,
with its own X display and loopback ports; all share one random bearer token written to a 0600
file. Readiness is polled on /readyz like the static source. Set $KUBECUA_SANDBOX_LOCAL to use
another launcher binary.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.static import ReadinessPoller

REPO = Path(__file__).resolve().parents[3]
PR_SET_CHILD_SUBREAPER = 36
DEFAULT_LAUNCHER = REPO / "sandbox-image/episode-server/.venv/bin/kubecua-sandbox-local"


def launcher_path() -> Path:
    return Path(os.environ.get("KUBECUA_SANDBOX_LOCAL", str(DEFAULT_LAUNCHER)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_display(start: int = 90, taken: set[int] | None = None) -> int:
    """The first X display number with neither a lock file nor a socket."""
    n = start
    while (
        n in (taken or set())
        or Path(f"/tmp/.X{n}-lock").exists()
        or Path(f"/tmp/.X11-unix/X{n}").exists()
    ):
        n += 1
    return n


def become_subreaper() -> None:
    """Adopt orphaned grandchildren (a launcher killed with SIGKILL leaves its desktop session
    behind), so reap_orphans() can still stop them. Linux only; elsewhere a no-op."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans(marker: str, grace: float = 10.0) -> list[int]:
    """SIGTERM (then SIGKILL) our adopted children whose command line names `marker`."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and marker in cmdline:
            pids.append(int(stat.parent.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)  # each one leads its own session
    deadline = time.monotonic() + grace
    for pid in pids:
        while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return pids


@dataclass
class LocalSandbox:
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path


class LocalSource:
    def __init__(self, replicas: int, workdir: Path, start_timeout: float = 300.0) -> None:
        self.replicas = replicas
        self.workdir = Path(workdir)
        self.start_timeout = start_timeout
        self.token: str | None = secrets.token_urlsafe(24)
        self.sandboxes: list[LocalSandbox] = []
        self._poller: ReadinessPoller | None = None

    async def start(self, leases: SandboxLeases) -> None:
        launcher = launcher_path()
        if not launcher.exists():
            raise FileNotFoundError(
                f"{launcher} not found: run `make sandbox-env` first (or set KUBECUA_SANDBOX_LOCAL)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        become_subreaper()
        token_file = self.workdir / "token"
        token_file.write_text(self.token or "")
        token_file.chmod(0o600)
        displays: set[int] = set()
        for i in range(self.replicas):
            displays.add(free_display(taken=displays))
            self.sandboxes.append(self._spawn(launcher, i, max(displays), token_file))
        self._poller = ReadinessPoller([s.url for s in self.sandboxes])
        leases.where = f"local desktops, their logs in {self.workdir}"
        leases.expected = self.replicas
        await self._poller.start(leases)
        ready = asyncio.ensure_future(leases.wait_ready(self.replicas, self.start_timeout))
        exited = asyncio.ensure_future(self._first_exit())
        await asyncio.wait([ready, exited], return_when=asyncio.FIRST_COMPLETED)
        exited.cancel()
        if not ready.done():  # a launcher died first: waiting out start_timeout would gain nothing
            ready.cancel()
            dead = exited.result()
            await self.stop()
            log = dead.workdir / "launcher.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(
                f"local sandbox {dead.url} exited with code {dead.process.returncode} before it "
                f"was ready; its log ({log}) ends:\n  " + "\n  ".join(tail)
            )
        try:
            ready.result()
        except TimeoutError as err:  # wait_ready's message: how long, how many of how many
            await self.stop()
            raise TimeoutError(f"starting local desktops: {err}") from None

    async def _first_exit(self) -> LocalSandbox:
        """The first launcher to exit (polled: a Popen gives no awaitable exit)."""
        while True:
            for sb in self.sandboxes:
                if sb.process.poll() is not None:
                    return sb
            await asyncio.sleep(0.25)

    def _spawn(self, launcher: Path, i: int, display: int, token_file: Path) -> LocalSandbox:
        port = free_port()
        workdir = self.workdir / f"sandbox-{i}"
        workdir.mkdir(parents=True, exist_ok=True)
        args = [str(launcher), "--display", str(display), "--episode-port", str(port)]
        for flag in ("--desktop-port", "--cdp-port", "--vlc-port"):
            args += [flag, str(free_port())]
        args += ["--token-file", str(token_file), "--workdir", str(workdir)]
        log = open(workdir / "launcher.log", "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()  # the child holds its own descriptor
        return LocalSandbox(f"http://127.0.0.1:{port}", proc, workdir)

    async def stop(self) -> None:
        if self._poller is not None:
            await self._poller.stop()
        for sb in self.sandboxes:
            if sb.process.poll() is None:
                sb.process.send_signal(signal.SIGTERM)
        for sb in self.sandboxes:
            try:
                await asyncio.to_thread(sb.process.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(sb.process.pid, signal.SIGKILL)  # its own session: only its children
                await asyncio.to_thread(sb.process.wait)
        self.sandboxes.clear()
        for _ in range(3):  # a reaped session can orphan its own children once more
            if not await asyncio.to_thread(reap_orphans, str(self.workdir)):
                break
