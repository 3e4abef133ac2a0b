"""websockify's token plugin for the live view: a WebSocket is let through to the desktop's VNC
server only with the pool's bearer token in its `?token=` query (noVNC's `path` carries it).

websockify (Debian's, under /usr/bin/python3) imports this module by name from PYTHONPATH, which
kubecua_desktop.liveview points at this directory alone: nothing of the desktop server's venv
enters that interpreter. The token file is read at each connection, so a rotated Secret counts
at once. A wrong token is refused with a message that does not repeat it (websockify's own
TokenFile plugin logs the token it did not find).
"""

from __future__ import annotations

import hmac


class PoolToken:
    def __init__(self, source: str) -> None:
        port, _, path = source.partition(":")  # "5900:/var/run/secrets/kubecua/token"
        self.port, self.path = port, path

    def lookup(self, token: str) -> list[str]:
        try:
            with open(self.path, encoding="utf-8") as f:
                expected = f.read().strip()
        except OSError:
            expected = ""
        if expected and hmac.compare_digest(token.encode(), expected.encode()):
            return ["127.0.0.1", self.port]
        from websockify.websockifyserver import WebSockifyServer

        raise WebSockifyServer.EClose("live view refused: wrong or missing token")
