"""Warm path for /execute's pyautogui actions: hand them to the zygote instead of a new python.

Only what OSWorld/desktop-env sends takes it: `python -c <code>` or `python3 -c <code>` (argv
list, or a string without shell) whose code mentions pyautogui, and only when that `python` on
PATH is this server's own interpreter (the one the zygote runs). Everything else, or any
trouble with the zygote, goes the cold way (procs.run_command). The result is a CommandResult
with the same output, error, returncode and timeout/kill semantics as the cold path.

The zygote inherits this server's environment (DISPLAY, XAUTHORITY of its session), minus the
token; it is started once, restarted when it has died, and dies with the server (its stdin).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from kubecua_desktop.procs import PIPE_DRAIN_S, CommandResult, normalise, pump_into
from kubecua_desktop.zygote import HEADER

log = logging.getLogger("kubecua_desktop.warm")
READY_TIMEOUT_S = 30.0
REAP_TIMEOUT_S = 2.0  # a killed zygote's exit, after its socket already refuses connections
PYTHONS = {"python", "python3"}


def warm_argv(command: str | Sequence[str], shell: bool) -> list[str] | None:
    """The argv after `-c <code>` if this command may run warm, else None.

    >>> warm_argv(["python3", "-c", "import pyautogui; pyautogui.click(1, 2)"], False)
    []
    >>> warm_argv("python3 -c 'print(1)'", False) is None
    True
    """
    if shell:
        return None
    argv = normalise(command, shell=False)
    if len(argv) < 3 or argv[0] not in PYTHONS or argv[1] != "-c" or "pyautogui" not in argv[2]:
        return None
    return list(argv[3:])


def _same_interpreter(name: str) -> bool:
    """Does `name` on PATH resolve into the directory of this server's python (its venv)?"""
    found = shutil.which(name)
    with contextlib.suppress(OSError):
        return found is not None and os.path.samefile(
            Path(found).parent, Path(sys.executable).parent
        )
    return False


class WarmPython:
    """One zygote per server (per desktop session); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="kubecua-zygote-")  # 0700: only this user connects
        self._path = os.path.join(self._dir, "sock")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def run_command(
        self, command: str | Sequence[str], shell: bool, timeout: float
    ) -> CommandResult | None:
        """Run an /execute command warm if it may (warm_argv, and `python` on PATH is ours);
        None when it may not or the zygote is unavailable: the caller then runs it cold."""
        argv = warm_argv(command, shell)
        if argv is None:
            return None
        full = normalise(command, shell=False)  # [python, "-c", code, *argv]
        return self.run(full[2], argv, timeout) if _same_interpreter(full[0]) else None

    def start(self) -> bool:
        """Start the zygote if it is not running; False if it cannot (then callers go cold)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return True
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(self._path)
            listener.listen(64)
            env = {k: v for k, v in os.environ.items() if k != "KUBECUA_SANDBOX_TOKEN"}
            argv = [sys.executable, "-m", "kubecua_desktop.zygote", str(listener.fileno())]
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=[listener.fileno()],
                start_new_session=True,
            )
            listener.close()
            ready = _read_line(proc, READY_TIMEOUT_S)
            if ready != b"ready\n":
                log.warning("warm python executor did not start (%r); running actions cold", ready)
                _stop(proc)
                self._proc = None
                return False
            self._proc = proc
            return True

    def run(self, code: str, argv: list[str], timeout: float) -> CommandResult | None:
        """Run one action warm; None if the zygote is unavailable (nothing was started)."""
        submitted = self._submit_started(code, argv)
        if submitted is None:
            return None
        conn, out_r, err_r = submitted
        out: list[bytes] = []
        err: list[bytes] = []
        # pump_into closes each file at EOF
        readers = [pump_into(open(out_r, "rb"), out), pump_into(open(err_r, "rb"), err)]  # noqa: SIM115
        with conn:
            returncode, timed_out, died = _wait(conn, timeout)
        for thread in readers:
            thread.join(PIPE_DRAIN_S)
        if died:
            err.append(b"\nkubecua: the warm python executor died during this action\n")
        return CommandResult(returncode, b"".join(out).decode(errors="replace"),
                             b"".join(err).decode(errors="replace"), timed_out)  # fmt: skip

    def _submit_started(self, code: str, argv: list[str]) -> tuple[socket.socket, int, int] | None:
        """The action handed to a running zygote: its connection and the read ends of its stdout
        and stderr; None when no zygote takes it."""
        for attempt in range(2):
            if not self.start():
                return None
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                conn = self._submit(code, argv, out_w, err_w)
            finally:
                os.close(out_w)
                os.close(err_w)
            if conn is not None:
                return conn, out_r, err_r
            os.close(out_r)
            os.close(err_r)
            # A zygote that has just died closes its socket before the kernel reports its exit,
            # so start() can still see it running: reap it and start a new one, once.
            if attempt or not self._reaped():
                return None
        return None

    def _reaped(self) -> bool:
        """True once the zygote has exited (waiting briefly for one that is dying)."""
        with self._lock:
            if self._proc is None:
                return True
            try:
                self._proc.wait(timeout=REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return False  # alive but not answering: run cold rather than start a second one
            return True

    def _submit(self, code: str, argv: list[str], out_w: int, err_w: int) -> socket.socket | None:
        payload = json.dumps({"code": code, "argv": argv}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._path)
            socket.send_fds(conn, [HEADER.pack(len(payload)) + payload], [out_w, err_w])
        except OSError as exc:
            log.warning("warm python executor unreachable (%s); running the action cold", exc)
            conn.close()
            return None
        return conn

    def stop(self) -> None:
        with self._lock:
            if self._proc is not None:
                _stop(self._proc)
                self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    box: list[bytes] = []
    assert proc.stdout is not None
    thread = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    thread.start()
    thread.join(timeout)
    return box[0] if box else b""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _wait(conn: socket.socket, timeout: float) -> tuple[int, bool, bool]:
    """Wait for "pid N" then "exit N"; on timeout kill the action's process group.

    Returns (returncode, timed_out, executor_died)."""
    deadline = time.monotonic() + timeout
    buf = bytearray()
    pid = None
    try:
        pid = int(_recv_line(conn, buf, deadline).split()[1])
        return int(_recv_line(conn, buf, deadline).split()[1]), False, False
    except TimeoutError:
        if pid is not None:
            _kill_action(pid)
        with contextlib.suppress(OSError, IndexError, ValueError):
            _recv_line(conn, buf, time.monotonic() + 10)  # its "exit -9", once reaped
        return -signal.SIGKILL, True, False
    except (OSError, IndexError, ValueError):
        # The zygote died mid-action: the child may live on; stop it and report a failure.
        if pid is not None:
            _kill_action(pid)
        return -signal.SIGKILL, False, True


def _recv_line(conn: socket.socket, buf: bytearray, deadline: float) -> bytes:
    while b"\n" not in buf:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("warm executor closed the connection")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def _kill_action(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # not yet setsid'd (or gone): the process alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
