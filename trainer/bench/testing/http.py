"""The HTTP side of the stand-ins that speak the episode API in tests and benchmarks
(tests/loopback_sandbox.py, bench/replay_desktop.py): the standard library's http.server, which
starts in milliseconds in any process; the stand-ins supply what the answers say."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

Answer = tuple[int, Any]  # (HTTP status, JSON body)


def send_json(handler: BaseHTTPRequestHandler, code: int, body: Any) -> None:
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def episode_api_handler(
    token: str, readyz: Callable[[], Answer], handle: Callable[[str, str, Any], Answer]
) -> type[BaseHTTPRequestHandler]:
    """A handler class: GET /readyz answers readyz() without auth, as the episode server does;
    every other request needs `Authorization: Bearer <token>` (else 401) and is answered by
    handle(method, path, JSON body or None)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _route(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            if self.path == "/readyz":
                return send_json(self, *readyz())
            if self.headers.get("Authorization") != f"Bearer {token}":
                return send_json(self, 401, {"detail": "bad token", "reason": "Unauthorized"})
            send_json(self, *handle(method, self.path, body))

        def do_GET(self) -> None:  # (http.server's names)
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler
