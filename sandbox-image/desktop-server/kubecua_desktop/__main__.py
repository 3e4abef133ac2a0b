"""Serve OSWorld's in-VM desktop API on the current DISPLAY.

    KUBECUA_SANDBOX_TOKEN=secret python -m kubecua_desktop --host 127.0.0.1 --port 5000

Auth: every route needs `Authorization: Bearer <token>` (KUBECUA_SANDBOX_TOKEN, or the file
named by KUBECUA_SANDBOX_TOKEN_FILE). `--trust-loopback` (or KUBECUA_DESKTOP_TRUST_LOOPBACK=1)
lets clients on 127.0.0.1 in without one, for desktop-env's controllers, which send no header.
Leaves out: TLS (terminate it in front), Windows and macOS desktops.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from kubecua_desktop.app import create_app
from kubecua_desktop.settings import Settings, SettingsError


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a pod)")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument(
        "--trust-loopback", action="store_true", help="no token needed on 127.0.0.1"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = Settings.from_env(host=args.host, port=args.port)
        settings.trust_loopback = settings.trust_loopback or args.trust_loopback
        app = create_app(settings)
    except SettingsError as exc:
        sys.exit(f"kubecua-desktop-server: {exc}")
    # Commands run for the agent inherit this environment: keep the token out of their reach.
    os.environ.pop("KUBECUA_SANDBOX_TOKEN", None)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
