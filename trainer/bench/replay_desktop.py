"""A stand-in sandbox replaying episodes recorded on real desktops, for `make bench-loop`.

Why a stand-in: the GPU machine that runs the whole-loop benchmark has no desktops (and its CPUs
would starve the GPU if it ran eight), so this serves what real desktops served instead. It speaks
the episode API (docs/episode-api.md) over real HTTP, so the trainer's own rollout code
(rollout/episode.py through kubecua_sandbox_client) runs unchanged against it. Only the standard
library: the GPU machine may lack the episode server's web stack.

What it replays: recordings/typeword/episodes.jsonl, two episodes that `kubecua record` played on
real Xvfb desktops (trajectories.py format, the screenshots' PNG bytes as the desktops encoded
them). POST /episodes answers after the recorded episode's seconds minus its steps' (the task
set-up and evaluation of the real run) with its first screenshot; step k answers after turn k's
recorded env_seconds with the screenshot that followed it, byte for byte. Episodes longer than
the recording cycle through its turns. The score: the recorded reward for every other episode
(sandbox index + episodes it started, even), 0 for the others, so that a group played on a row of
these sandboxes by a random-weight policy has mixed rewards.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.testing.http import episode_api_handler

RECORDING = Path(__file__).parent / "recordings" / "typeword"


@dataclass(frozen=True)
class RecordedEpisode:
    """One recorded episode: its screenshots in order (the first before turn 0, the last after
    the final turn), the seconds each turn's step took, and the start's seconds."""

    key: str
    screens: list[bytes]
    step_seconds: list[float]
    start_seconds: float
    reward: float
    size: tuple[int, int]


def load_recording(path: Path = RECORDING) -> list[RecordedEpisode]:
    episodes = []
    for line in (path / "episodes.jsonl").read_text().splitlines():
        row = json.loads(line)
        turns = row["turns"]
        files = [t["screenshot"] for t in turns] + [row["final_screenshot"]]
        steps = [float(t["env_seconds"]) for t in turns]
        episodes.append(
            RecordedEpisode(
                key=row["key"],
                screens=[(path / f).read_bytes() for f in files],
                step_seconds=steps,
                start_seconds=max(0.0, float(row["seconds"]) - sum(steps)),
                reward=float(row["reward"]),
                size=(int(row["screen_size"][0]), int(row["screen_size"][1])),
            )
        )
    if not episodes:
        raise ValueError(f"{path / 'episodes.jsonl'}: no recorded episode")
    return episodes


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up mid-request (a cancelled rollout)


class ReplaySandbox:
    """One replayed desktop on 127.0.0.1 (its own port); one episode at a time, as a real one.
    latency_scale multiplies the recorded waits (1.0: as recorded; tests use 0)."""

    def __init__(
        self,
        episodes: list[RecordedEpisode],
        token: str,
        latency_scale: float = 1.0,
        index: int = 0,
    ):
        self.episodes = episodes
        self.index = index
        self.token = token
        self.latency_scale = latency_scale
        self.started = 0
        self.served: list[bytes] = []  # every screenshot sent, in order (the tests compare them)
        self._current: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ReplaySandbox:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _observation(self, ep: RecordedEpisode, index: int, step: int) -> dict[str, Any]:
        data = ep.screens[index]
        self.served.append(data)
        return {"screenshot": base64.b64encode(data).decode(), "format": "png",
                "width": ep.size[0], "height": ep.size[1], "step": step}  # fmt: skip

    def _wait(self, seconds: float) -> None:
        if seconds * self.latency_scale > 0:
            time.sleep(seconds * self.latency_scale)  # the recorded latency is the point here

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        if method == "POST" and path == "/episodes":
            return self._start(body)
        cur = self._current
        if cur is None or not path.startswith(f"/episodes/{cur['id']}"):
            return 404, {"detail": "unknown episode", "reason": "UnknownEpisode"}
        ep: RecordedEpisode = cur["episode"]
        if method == "DELETE":
            with self._lock:
                self._current = None
            return 200, {"reset_seconds": 0.0, "clean": True}
        if path.endswith("/step"):
            turn = cur["steps"] % len(ep.step_seconds)
            self._wait(ep.step_seconds[turn])
            cur["steps"] += 1
            done = isinstance(body, dict) and body.get("action") in ("DONE", "FAIL")
            return 200, {"observation": self._observation(ep, turn + 1, cur["steps"]),
                         "done": done, "info": {}}  # fmt: skip
        if path.endswith("/evaluate"):
            return 200, {
                "score": ep.reward if (cur["number"] + self.index) % 2 == 0 else 0.0,
                "details": {},
            }
        return 404, {"detail": "no route", "reason": "NotFound"}

    def _start(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self._current is not None:
                return 409, {"detail": "busy", "reason": "SandboxBusy"}
            number, self.started = self.started, self.started + 1
            ep = self.episodes[number % len(self.episodes)]
            eid = body.get("episode_id") or f"ep-{uuid.uuid4().hex[:8]}"
            self._current = {"id": eid, "episode": ep, "steps": 0, "number": number}
        self._wait(ep.start_seconds)
        instruction = body.get("task", {}).get("instruction", "")
        return 201, {"episode_id": eid, "instruction": instruction,
                     "observation": self._observation(ep, 0, 0),
                     "setup_seconds": ep.start_seconds * self.latency_scale}  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        def readyz() -> tuple[int, dict[str, Any]]:
            return 200, {"ready": True, "busy": self._current is not None}

        return episode_api_handler(self.token, readyz, self.handle)
