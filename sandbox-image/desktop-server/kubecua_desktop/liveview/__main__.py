"""Start the live view of a desktop (kubecua_desktop/liveview/__init__.py says what it is):

    KUBECUA_LIVE_VIEW=viewOnly KUBECUA_SANDBOX_TOKEN_FILE=/path/token \
      python -m kubecua_desktop.liveview --display :0 --xauthority ~/.Xauthority --port 6080

then open http://HOST:6080/vnc.html?autoconnect=1&resize=scale&path=websockify%3Ftoken%3DTOKEN
KUBECUA_LIVE_VIEW: off (the default: exit 0 at once), viewOnly (x11vnc drops every key and
pointer event) or interactive. Supervises both processes: when one ends, the other is stopped
and this exits non-zero, for supervisord to restart it. Leaves out: TLS (port-forward carries
it), and any VNC password (x11vnc listens on 127.0.0.1; the token guards the WebSocket).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

log = logging.getLogger("kubecua.liveview")
MODES = ("off", "viewOnly", "interactive")
PLUGIN_DIR = Path(__file__).parent / "plugin"
NOVNC = Path("/usr/share/novnc")
WEBSOCKIFY_PYTHON = "/usr/bin/python3"  # Debian's websockify package lives in its dist-packages


def x11vnc_argv(display: str, xauthority: str, vnc_port: int, view_only: bool) -> list[str]:
    """x11vnc on 127.0.0.1 only: nothing outside the pod reaches it but through websockify."""
    argv = ["x11vnc", "-display", display, "-auth", xauthority, "-localhost", "-rfbport",
            str(vnc_port), "-nopw", "-forever", "-shared", "-quiet", "-noipv6"]  # fmt: skip
    return [*argv, "-viewonly"] if view_only else argv


def websockify_argv(host: str, port: int, vnc_port: int, token_file: Path) -> list[str]:
    return [WEBSOCKIFY_PYTHON, "-m", "websockify", "--web", str(NOVNC),
            "--token-plugin", "kubecua_live_token.PoolToken",
            "--token-source", f"{vnc_port}:{token_file}", f"{host}:{port}"]  # fmt: skip


def token_file(private: Path) -> Path:
    """The pool's token as a file the plugin reads at each connection: the mounted Secret's
    own file where there is one (a rotation counts at once), else a 0600 copy of the variable."""
    named = os.environ.get("KUBECUA_SANDBOX_TOKEN_FILE")
    if named and Path(named).is_file():
        return Path(named)
    token = os.environ.get("KUBECUA_SANDBOX_TOKEN", "").strip()
    if not token:
        sys.exit("kubecua-liveview: the live view needs the pool's token: set"
                 " KUBECUA_SANDBOX_TOKEN_FILE or KUBECUA_SANDBOX_TOKEN")  # fmt: skip
    path = private / "token"
    path.touch(mode=0o600)
    path.write_text(token)
    return path


def wait_for_display(display: str, timeout: float) -> None:
    """The X socket of `display` (Xvfb starts beside this under supervisord)."""
    socket = Path(f"/tmp/.X11-unix/X{display.lstrip(':').split('.')[0]}")
    deadline = time.monotonic() + timeout
    while not socket.exists():
        if time.monotonic() > deadline:
            sys.exit(f"kubecua-liveview: display {display} did not come up in {timeout:.0f} s")
        time.sleep(0.2)


TOKEN_IN_URL = re.compile(r"token=[^&'\"\s]*")


def redacted(stream: IO[bytes], out: IO[str]) -> None:
    """Copy a child's output lines, with any `token=...` masked: websockify logs each
    WebSocket's path, query and all, and the query holds the pool's token."""
    for raw in iter(stream.readline, b""):
        out.write(TOKEN_IN_URL.sub("token=<redacted>", raw.decode(errors="replace")))
        out.flush()


def supervise(argvs: list[list[str]], env: dict[str, str]) -> int:
    """Run every argv (their output through `redacted`); when one exits (or SIGTERM comes), stop
    the rest; the first exit code."""
    procs = []
    for a in argvs:
        p = subprocess.Popen(a, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert p.stdout is not None
        threading.Thread(target=redacted, args=(p.stdout, sys.stdout), daemon=True).start()
        procs.append(p)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while not stopping:
        ended = [p for p in procs if p.poll() is not None]
        if ended:
            code = ended[0].returncode or 1  # neither should ever end on its own
            log.error("%s exited with %s", argvs[procs.index(ended[0])][0], ended[0].returncode)
            break
        time.sleep(0.2)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    return code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--display", default=os.environ.get("DISPLAY", ":0"))
    parser.add_argument("--xauthority", default=os.environ.get("XAUTHORITY", ""))
    parser.add_argument("--host", default="0.0.0.0", help="websockify's bind address")
    parser.add_argument("--port", type=int, default=6080, help="noVNC and its WebSocket")
    parser.add_argument("--vnc-port", type=int, default=5900, help="x11vnc, on 127.0.0.1")
    parser.add_argument("--display-timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    mode = os.environ.get("KUBECUA_LIVE_VIEW", "off") or "off"
    if mode not in MODES:
        sys.exit(f"kubecua-liveview: KUBECUA_LIVE_VIEW={mode!r}: use one of {', '.join(MODES)}")
    if mode == "off":
        log.info("live view off (KUBECUA_LIVE_VIEW)")
        return
    missing = [b for b in ("x11vnc", WEBSOCKIFY_PYTHON) if shutil.which(b) is None]
    if missing or not (NOVNC / "vnc.html").exists():
        sys.exit(f"kubecua-liveview: missing {missing or [str(NOVNC)]}: install x11vnc, novnc"
                 " and websockify (sandbox-image/install/apt-packages.txt)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kubecua-liveview-") as private:
        tokens = token_file(Path(private))
        wait_for_display(args.display, args.display_timeout)
        env = {**os.environ, "PYTHONPATH": str(PLUGIN_DIR)}
        env.pop("KUBECUA_SANDBOX_TOKEN", None)  # the plugin reads the file
        view_only = mode == "viewOnly"
        log.info("live view on port %d (%s)", args.port, mode)
        code = supervise(
            [x11vnc_argv(args.display, args.xauthority, args.vnc_port, view_only),
             websockify_argv(args.host, args.port, args.vnc_port, tokens)], env,
        )  # fmt: skip
    sys.exit(code)


if __name__ == "__main__":
    main()
