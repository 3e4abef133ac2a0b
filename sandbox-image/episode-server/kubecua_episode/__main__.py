"""Runs the episode server (docs/episode-api.md) on 127.0.0.1:8000 by default.

    KUBECUA_SANDBOX_TOKEN_FILE=/var/run/kubecua/token python -m kubecua_episode --port 8000

Settings come from KUBECUA_* environment variables (settings.py). It attaches to an already
running desktop; it never starts one (see local.py for a desktop + episode server together).
--remote (the image's `episode-server` mode) demands KUBECUA_DESKTOP_URL: a desktop on another
host, such as a KubeVirt VM, reset through its API only (reset.py)."""

from __future__ import annotations

import argparse

import uvicorn

from kubecua_episode import logs
from kubecua_episode.settings import Settings, SettingsError


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="kubecua-episode-server", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--remote", action="store_true", help="require KUBECUA_DESKTOP_URL")
    args = p.parse_args(argv)
    logs.configure(args.log_level)
    try:
        settings = Settings.from_env()
    except SettingsError as e:
        p.exit(2, f"{p.prog}: {e}\n")
    if args.remote and not settings.remote:
        p.exit(
            2, f"{p.prog}: --remote needs KUBECUA_DESKTOP_URL=http://host[:port] (the desktop)\n"
        )
    from kubecua_episode.app import build_app  # after validation: desktop-env's import is noisy

    app = build_app(settings)
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)


if __name__ == "__main__":
    main()
