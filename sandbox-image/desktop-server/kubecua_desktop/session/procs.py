"""Child processes of a desktop session: start with a log file, wait for readiness, stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

POLL_S = 0.05


class SessionError(RuntimeError):
    """A session component failed to start; the message carries its log tail."""


def log_tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class Child:
    """One component (Xvfb, dbus, ...) in its own process group, logging to logs/<name>.log."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_dir: Path,
        pass_fds: Sequence[int] = (),
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=tuple(pass_fds), start_new_session=True, cwd=cwd,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fail(self, why: str) -> SessionError:
        return SessionError(f"{self.name}: {why}\n--- {self.log} ---\n{log_tail(self.log)}")

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll check() until true; fail early if the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if not self.alive():
                raise self.fail(f"exited with {self.proc.returncode} before {what}")
            time.sleep(POLL_S)
        raise self.fail(f"not {what} after {timeout:g} s")

    def stop(self, grace: float = 5.0) -> None:
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def read_line_from_fd(fd: int, child: Child, timeout: float, what: str) -> str:
    """Read one line a child writes to our pipe (Xvfb -displayfd, dbus --print-address)."""
    os.set_blocking(fd, False)
    buffer = b""
    result: list[str] = []

    def got_line() -> bool:
        nonlocal buffer
        with contextlib.suppress(BlockingIOError):
            buffer += os.read(fd, 4096)
        if b"\n" in buffer:
            result.append(buffer.split(b"\n", 1)[0].decode().strip())
            return True
        return False

    child.wait_until(got_line, timeout, what)
    return result[0]
