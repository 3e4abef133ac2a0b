"""The warm python executor ("zygote"): imports pyautogui once, then forks one child per action.

    python -m kubecua_desktop.zygote <listening-unix-socket-fd>

Started by kubecua_desktop.warm (never by hand). A fresh `python3 -c "import pyautogui; ..."`
spends 0.4-0.5 s importing; this process imports it once and keeps one "spare" child forked in
advance, already leading its own session (so the caller can kill its whole process group) and
holding its own X connection. Each action arrives on its own connection with the caller's stdout
and stderr pipes (SCM_RIGHTS); the zygote hands it to the spare, forks the next spare, and the
action runs with stdin on /dev/null exactly like `python3 -c <code>`: same __main__, sys.argv,
traceback, SystemExit handling and exit status. The connection gets "pid N" once the action is
handed over and "exit N" (subprocess-style returncode, negative for a signal) once it is reaped.

One difference, on purpose: pyautogui's fixed pause (PAUSE, 0.1 s) after the action's *last*
call is dropped. Between two calls it is kept (the next call waits out what is left of it); after
the last one the caller waits for the screen itself (the episode server's settle detection, or
desktop-env's own pause), so sleeping there only adds latency.

Exits when its stdin (a pipe from the server) closes. Leaves out: `python -c` flags (-u, -I, ...).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
import types

HEADER = struct.Struct("!I")  # payload length, then JSON {"code": str, "argv": [str, ...]}


def _preload() -> list[types.ModuleType]:
    """Import what actions use; close their X connections (children must not share a socket)."""
    import time  # noqa: F401  (desktop-env's prefix imports it)

    import pyautogui

    _defer_pauses(pyautogui)
    modules = [
        sys.modules[n] for n in ("pyautogui._pyautogui_x11", "mouseinfo") if n in sys.modules
    ]
    for module in modules:
        display = getattr(module, "_display", None)
        if display is not None:
            display.close()
    return modules


def _defer_pauses(pyautogui: types.ModuleType) -> None:
    """pyautogui sleeps PAUSE after every call; keep that gap only before a next call.

    Every public pyautogui call starts with failSafeCheck() and ends with _handlePause() (both
    looked up as module globals at call time), so the end records a deadline and the next
    start waits for it; time the action spends meanwhile (its own sleeps) counts."""
    import time

    resume_at = 0.0
    check = pyautogui.failSafeCheck

    def handle_pause(_pause: bool) -> None:
        nonlocal resume_at
        if _pause:
            resume_at = time.monotonic() + pyautogui.PAUSE

    def fail_safe_check() -> None:
        nonlocal resume_at
        if (wait := resume_at - time.monotonic()) > 0:
            time.sleep(wait)
        resume_at = 0.0
        check()

    pyautogui._handlePause = handle_pause  # type: ignore[attr-defined]
    pyautogui.failSafeCheck = fail_safe_check  # type: ignore[attr-defined]


def _exit_status(exc: SystemExit) -> int:
    """What CPython does with an uncaught SystemExit: None->0, int->itself, else print and 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _run_action(code: str, argv: list[str]) -> int:
    """Run code as `python -c` would, in this (forked) process; returns the exit status."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv, sys.path[0] = ["-c", *argv], ""
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:  # an action's crash is reported, as python does
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # hide this frame
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # CPython's status when stdout cannot be flushed at exit
    return status


def _spare(hand: socket.socket, x_modules: list[types.ModuleType]) -> None:
    """In a freshly forked child: get ready for an action, wait for it on `hand`, run it, and
    never return into the zygote's loop."""
    status = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        atexit._clear()
        # Nothing of the zygote's may stay open here: a caller's connection held by a spare
        # would hide the zygote's death from that caller.
        keep = hand.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 65536)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        if x_modules:  # a private X connection, as a fresh interpreter has
            from Xlib.display import Display

            display = Display(os.environ["DISPLAY"])
            for module in x_modules:
                module._display = display  # type: ignore[attr-defined]
        request, fds = _receive(hand)  # blocks until the zygote hands over an action
        hand.close()
        for fd, target in ((fds[0], 1), (fds[1], 2)):
            os.dup2(fd, target)
            os.close(fd)
        status = _run_action(str(request["code"]), list(request["argv"]))  # type: ignore[call-overload]
    except EOFError:  # the zygote is gone before it needed this spare
        status = 0
    except BaseException:  # never return into the zygote's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status & 0xFF)


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 65536, 2)
    if not data and not fds:
        raise EOFError("closed")
    if len(data) < HEADER.size or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        raise ValueError("bad request")
    (size,) = HEADER.unpack_from(data)
    payload = bytearray(data[HEADER.size :])
    while len(payload) < size:
        chunk = conn.recv(size - len(payload))
        if not chunk:
            raise ValueError("truncated request")
        payload += chunk
    return json.loads(payload), fds


class Zygote:
    def __init__(self, listener: socket.socket, x_modules: list[types.ModuleType]) -> None:
        self.listener, self.x_modules = listener, x_modules
        self.running: dict[int, socket.socket] = {}  # action pid -> its caller's connection
        self.spare: tuple[int, socket.socket] | None = None  # (pid, the zygote's end)
        self.selector = selectors.DefaultSelector()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w)
        self.wake_r = wake_r
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.selector.register(wake_r, selectors.EVENT_READ, self._reap)
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, self._stdin)

    def serve(self) -> None:
        self._fork_spare()
        while True:
            for key, _ in self.selector.select():
                key.data()

    def _stdin(self) -> None:
        if not os.read(sys.stdin.fileno(), 4096):
            os._exit(0)  # the server is gone; running actions keep going on their own

    def _fork_spare(self) -> None:
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _spare(theirs, self.x_modules)
        theirs.close()
        self.spare = (pid, ours)

    def _hand_over(self, message: bytes, fds: list[int]) -> int:
        """Give the action to the spare (a new one if it has died); returns the action's pid."""
        for _ in range(2):
            if self.spare is None:
                self._fork_spare()
            assert self.spare is not None
            (pid, hand), self.spare = self.spare, None
            try:
                socket.send_fds(hand, [message], fds)
                return pid
            except OSError:
                continue  # it died meanwhile (reaped below, or on the next SIGCHLD)
            finally:
                hand.close()
        raise OSError("no spare child could take the action")

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            request, fds = _receive(conn)
            payload = json.dumps(request).encode()
            pid = self._hand_over(HEADER.pack(len(payload)) + payload, fds)
            self.running[pid] = conn
            conn.sendall(f"pid {pid}\n".encode())
        except (OSError, ValueError, EOFError) as exc:
            print(f"kubecua zygote: dropped a request: {exc}", file=sys.stderr)
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)
        if self.spare is None:
            self._fork_spare()  # ready for the next action while this one runs

    def _reap(self) -> None:
        os.read(self.wake_r, 4096)
        while True:
            try:
                pid, wstatus = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and self.spare[0] == pid:
                # Died waiting (its X connection failed?): the next action forks a new one,
                # rather than a loop of forks while the display is gone.
                self.spare[1].close()
                self.spare = None
            conn = self.running.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(wstatus)}\n".encode())
                conn.close()


def main() -> None:
    listener = socket.socket(fileno=int(sys.argv[1]))
    x_modules = _preload()
    print("ready", flush=True)
    Zygote(listener, x_modules).serve()


if __name__ == "__main__":
    main()
