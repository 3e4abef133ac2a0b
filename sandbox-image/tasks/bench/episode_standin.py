"""One in-process HTTP server answering the episode API for every sandbox of the leasing
benchmark (bench_leasing.py), each under its own path: http://127.0.0.1:PORT/s/<name>.

Why a stand-in: the benchmark's 1,000 sandboxes are endpoints on kwok, whose nodes run no
containers, so nothing listens at the addresses the pool's EndpointSlices name; and 1,000 real
episode servers would not fit on the machine. This server answers at once (no desktop, no
settling), so the figures are the leasing engine's and discovery's, not a desktop's.

It keeps one lease per sandbox as the episode server does: a start while an episode is held
answers 409, and counts as a double lease (the benchmark has no other client, so any 409 is the
engine leasing a sandbox it already holds). A plain asyncio HTTP/1.1 server (keep-alive,
Content-Length bodies, which is what httpx sends), not FastAPI: the tasks environment has no
ASGI server, and the benchmark should measure the client, not a framework.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field

OBSERVATION = {"screenshot": "", "format": "jpeg", "width": 1, "height": 1, "step": 0}
FINGERPRINT = {"screen": "0" * 64}  # every start the same screen: starts reproducible


@dataclass
class Lease:
    episode: str
    since: float
    score: float = 0.0


@dataclass
class StandIn:
    token: str
    delay: float = 0.0  # seconds each call takes (0: as fast as the loop goes)
    held: dict[str, Lease] = field(default_factory=dict)  # sandbox -> its lease now
    leases: Counter[str] = field(default_factory=Counter)  # sandbox -> leases granted
    double_leases: int = 0
    requests: int = 0
    hold_seconds: list[float] = field(default_factory=list)
    released_at: list[float] = field(default_factory=list)  # time.monotonic() of each release
    first_lease_at: float | None = None
    first_release: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listen on loopback; returns the base URL (a sandbox's is base + '/s/<name>')."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # the clients close their connections: 3.11 has no close_clients
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                headers = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    key, _, value = h.decode().partition(":")
                    headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                if self.delay:
                    await asyncio.sleep(self.delay)
                status, reply = self._answer(method, target, headers, body)
                data = json.dumps(reply).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    def _answer(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, object]]:
        self.requests += 1
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"detail": "bad token", "reason": "Unauthorized"}
        # /s/<sandbox>/episodes[/<id>[/step|/evaluate]]
        parts = target.split("?", 1)[0].strip("/").split("/")
        if len(parts) < 3 or parts[0] != "s" or parts[2] != "episodes":
            return 404, {"detail": target, "reason": "NotFound"}
        sandbox, rest = parts[1], parts[3:]
        lease = self.held.get(sandbox)
        if method == "POST" and not rest:
            if lease is not None:
                self.double_leases += 1
                return 409, {"detail": f"{sandbox} holds {lease.episode}", "reason": "SandboxBusy"}
            req = json.loads(body)
            episode = req.get("episode_id") or f"e{self.requests}"
            self.held[sandbox] = Lease(episode, time.monotonic())
            self.leases[sandbox] += 1
            self.first_lease_at = self.first_lease_at or self.held[sandbox].since
            return 200, {
                "episode_id": episode,
                "instruction": req["task"].get("instruction", ""),
                "observation": OBSERVATION,
                "start_fingerprint": FINGERPRINT,
            }
        if lease is None or not rest or rest[0] != lease.episode:
            return 404, {"detail": f"no episode {rest[:1]} on {sandbox}", "reason": "NotFound"}
        if method == "POST" and rest[1:] == ["step"]:
            if json.loads(body).get("action") == "ok":  # the tasks' reference step
                lease.score = 1.0
            return 200, {"observation": {**OBSERVATION, "step": 1}, "done": False}
        if method == "POST" and rest[1:] == ["evaluate"]:
            return 200, {"score": lease.score}
        if method == "DELETE" and len(rest) == 1:
            del self.held[sandbox]
            self.released_at.append(time.monotonic())
            self.hold_seconds.append(self.released_at[-1] - lease.since)
            self.first_release.set()
            return 200, {"reset_seconds": 0.0, "clean": True}
        return 404, {"detail": target, "reason": "NotFound"}
