"""Running commands for the API: each in its own process group, killed as a group on timeout.

Blocking functions; routes call them from worker threads (sync route functions), never on the
event loop. Output is read by threads so a background child that keeps a pipe open (``app &``)
cannot hold a finished command hostage until its timeout, a flaw of OSWorld's subprocess.run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# After the command itself exits, how long its pipes may stay open (held by children it left
# running in the background) before we stop reading and return what we have.
PIPE_DRAIN_S = 0.5


@dataclass
class CommandResult:
    returncode: int
    output: str
    error: str
    timed_out: bool = False


def normalise(command: str | Sequence[str], shell: bool) -> str | list[str]:
    """OSWorld's rules: a string without shell is split like a shell would; ~/ args are expanded.

    >>> normalise("ls ~/x", shell=False)[0]
    'ls'
    """
    if isinstance(command, str):
        return command if shell else [os.path.expanduser(a) for a in shlex.split(command)]
    return [os.path.expanduser(a) if a.startswith("~/") else a for a in command]


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group that proc leads (it was started with start_new_session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def pump_into(stream: object, sink: list[bytes]) -> threading.Thread:
    """Read stream into sink on a thread until EOF, then close it."""

    def pump() -> None:
        with stream:  # type: ignore[attr-defined]
            for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
                sink.append(chunk)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def run_command(
    command: str | Sequence[str],
    *,
    shell: bool = False,
    timeout: float,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    merge_stderr: bool = False,
) -> CommandResult:
    """Run to completion or timeout. Raises OSError if it cannot start (e.g. not found)."""
    proc = subprocess.Popen(
        normalise(command, shell),
        shell=shell,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [pump_into(proc.stdout, out)]
    if proc.stderr is not None:
        readers.append(pump_into(proc.stderr, err))
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        proc.wait()
    for thread in readers:
        thread.join(PIPE_DRAIN_S)
    return CommandResult(
        returncode=proc.returncode if not timed_out else -signal.SIGKILL,
        output=b"".join(out).decode(errors="replace"),
        error=b"".join(err).decode(errors="replace"),
        timed_out=timed_out,
    )


class Launcher:
    """Starts long-lived apps (/setup/launch) and stops what is still running at shutdown."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def launch(
        self, command: str | Sequence[str], *, shell: bool = False, env: Mapping[str, str] | None
    ) -> int:
        proc = subprocess.Popen(
            normalise(command, shell),
            shell=shell,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # Reap it as soon as it exits, so no zombie named "chrome" outlives a `pkill chrome`.
        threading.Thread(target=proc.wait, daemon=True).start()
        with self._lock:
            self._procs = [p for p in self._procs if p.returncode is None] + [proc]
        return proc.pid

    def stop_all(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)
                proc.wait()
