"""Runs the episode server (docs/episode-api.md) on 127.0.0.1:8000 by default.

    KUBECUA_SANDBOX_TOKEN_FILE=/var/run/kubecua/token python -m kubecua_episode --port 8000

Settings come from KUBECUA_* environment variables (settings.py). It attaches to an already
running desktop; it never starts one (see local.py for a desktop + episode server together)."""

from __future__ import annotations

import argparse

import uvicorn

from kubecua_episode import logs
from kubecua_episode.app import build_app
from kubecua_episode.settings import Settings


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="kubecua-episode-server", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logs.configure(args.log_level)
    app = build_app(Settings.from_env())
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)


if __name__ == "__main__":
    main()
