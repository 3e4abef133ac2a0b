"""Local desktops for verification: `make demo`'s kind, one `kubecua-sandbox-local` process each
(an Xvfb desktop with its episode server, from sandbox-image/episode-server's venv). A
SandboxPool's sandboxes are pool.py's."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
LAUNCHER = REPO / "sandbox-image/episode-server/.venv/bin/kubecua-sandbox-local"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_display(taken: set[int], start: int = 120) -> int:
    n = start
    while n in taken or Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists():
        n += 1
    return n


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


async def _ready(url: str, procs: list[subprocess.Popen[bytes]], limit: float) -> None:
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a local desktop exited before {url} was ready")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url + "/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.5)
    raise TimeoutError(f"local desktop {url} not ready after {limit:.0f} s")


def _spawn(display: int, port: int, token_file: Path, box: Path) -> subprocess.Popen[bytes]:
    box.mkdir(parents=True, exist_ok=True)
    args = [str(LAUNCHER), "--display", str(display), "--episode-port", str(port)]
    for flag in ("--desktop-port", "--cdp-port", "--vlc-port"):
        args += [flag, str(_free_port())]
    args += ["--token-file", str(token_file), "--workdir", str(box)]
    with open(box / "launcher.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip


@contextlib.asynccontextmanager
async def local_desktops(
    count: int, workdir: Path | None = None, limit: float = 300.0
) -> AsyncIterator[tuple[list[str], str]]:
    """Start `count` local desktops; yields (their episode URLs, the bearer token); stops them."""
    if not LAUNCHER.exists():
        raise FileNotFoundError(f"{LAUNCHER} not found: run `make sandbox-env` first")
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="kubecua-verify-")) if workdir is None else workdir
    token = secrets.token_urlsafe(24)
    token_file = work / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    procs: list[subprocess.Popen[bytes]] = []
    urls, displays = [], set[int]()
    try:
        for i in range(count):
            displays.add(_free_display(displays))
            port = _free_port()
            procs.append(_spawn(max(displays), port, token_file, work / f"desktop-{i}"))
            urls.append(f"http://127.0.0.1:{port}")
        await asyncio.gather(*(_ready(u, procs, limit) for u in urls))
        yield urls, token
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.to_thread(p.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)  # its own session: only its children
                await asyncio.to_thread(p.wait)
        if own:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
