"""A small real HTTP server on 127.0.0.1 speaking the read-only part of docs/episode-api.md
(GET /readyz, GET /status with a bearer token). The operator's external-backend tests use it
instead of full local sandboxes (Xvfb + desktop + episode server) because only readiness and the
busy flag matter to the operator, and two shared cores cannot spare a desktop per sandbox.
Tests flip `ready`, `busy` and `episodes_served` to play the sandbox's part, or call
start_episode/end_episode, which also keep the server's record of its episodes (when each began
and ended, time.monotonic()) for tests that check nothing happened to a sandbox mid-episode.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class EpisodeStub:
    def __init__(self, token: str = "") -> None:
        self.ready, self.busy, self.episodes_served, self.token = True, False, 0, token
        self.episodes: list[tuple[float, float | None]] = []  # (began, ended or None)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/readyz":
                    body = {"ready": stub.ready, "busy": stub.busy}
                    self._send(200 if stub.ready else 503, body)
                elif self.path == "/status":
                    if stub.token and self.headers.get("Authorization") != f"Bearer {stub.token}":
                        self._send(401, {"detail": "bad token", "reason": "Unauthorized"})
                        return
                    self._send(
                        200,
                        {
                            "ready": stub.ready,
                            "busy": stub.busy,
                            "episode_id": None,
                            "episodes_served": stub.episodes_served,
                            "last_reset_seconds": 0.0,
                        },
                    )
                else:
                    self._send(404, {"detail": "no such route", "reason": "NotFound"})

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def start_episode(self) -> None:
        self.episodes.append((time.monotonic(), None))
        self.busy = True

    def end_episode(self) -> None:
        began, _ = self.episodes[-1]
        self.busy = False
        self.episodes[-1] = (began, time.monotonic())
        self.episodes_served += 1

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
