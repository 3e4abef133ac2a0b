"""Start a local desktop session and keep it up until SIGTERM or Ctrl-C.

    python -m kubecua_desktop.session --display 7 --port 5007 --cdp-port 9227 --vlc-port 8087 \
        --home /tmp/desk7 --token-file /run/secret/token

Starts Xvfb (1920x1080x24), a session D-Bus, the AT-SPI bus, openbox, a wallpaper and the desktop
server, then prints one JSON line (display, url, ports, env) on stdout once a screenshot comes back
and is not black. Run several at once with distinct --display, ports and --home. Leaves out: apps
(tasks launch them), PulseAudio, noVNC. Ports --cdp-port/--vlc-port are where this desktop expects
Chrome's CDP forwarder and VLC's HTTP interface; OSWorld task configs say 9222/8080 and need
rewriting when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from kubecua_desktop.session.config import SessionConfig
from kubecua_desktop.session.procs import SessionError
from kubecua_desktop.session.session import DesktopSession
from kubecua_sandbox_client import TokenError, read_token


def parse(argv: list[str] | None) -> SessionConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--display", type=lambda s: int(s.lstrip(":")), default=None)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--cdp-port", type=int, default=9222)
    p.add_argument("--vlc-port", type=int, default=8080)
    p.add_argument(
        "--vlc-host", default="127.0.0.1", help="VLC web interface address (VM: 0.0.0.0)"
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=60.0,
        help="seconds each component may take to start (a VM's emulator: minutes)",
    )
    p.add_argument("--home", type=Path, default=Path.home())
    p.add_argument("--runtime-dir", type=Path, help="XDG_RUNTIME_DIR (default: a temporary dir)")
    p.add_argument("--token-file", type=Path, help="else KUBECUA_SANDBOX_TOKEN(_FILE)")
    p.add_argument("--trust-loopback", action="store_true", help="no token needed on 127.0.0.1")
    a = p.parse_args(argv)
    if a.token_file:
        os.environ["KUBECUA_SANDBOX_TOKEN_FILE"] = str(a.token_file)
    return SessionConfig(
        display=a.display, width=a.width, height=a.height, host=a.host, port=a.port,
        cdp_port=a.cdp_port, vlc_port=a.vlc_port, vlc_host=a.vlc_host, home=a.home.resolve(),
        token=read_token(), trust_loopback=a.trust_loopback, runtime_dir=a.runtime_dir,
        start_timeout_s=a.start_timeout,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    try:
        config = parse(argv)
    except TokenError as exc:
        sys.exit(f"kubecua-desktop-session: {exc}")
    if not config.token and not config.trust_loopback:
        sys.exit("kubecua-desktop-session: set KUBECUA_SANDBOX_TOKEN(_FILE) or --trust-loopback")
    session = DesktopSession(config)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unwinds to the finally below
    try:
        info = session.start()
        print(json.dumps(session.as_dict() | {"env": {"DISPLAY": info.display}}), flush=True)
        signal.pause()
    except SessionError as exc:
        sys.exit(f"kubecua-desktop-session: {exc}")
    except KeyboardInterrupt:
        pass
    finally:
        session.stop()


if __name__ == "__main__":
    main()
