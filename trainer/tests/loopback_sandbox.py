"""A small real episode server on loopback for the trainer's tests (not a mock: real HTTP).

Used where a real desktop is not needed (leases, sources, rollout logic, failure injection);
the end-to-end test uses real local sandboxes. It implements docs/episode-api.md with a
synthetic screen: the task's evaluator is {"func": "clicked", "expected": N}: score 1.0 when the
episode sent at least N actions before DONE, else 0.0 (so a random policy gets mixed rewards).
Evaluator {"func": "coin"}: 1.0 for every other episode this sandbox starts (mixed rewards
whatever the policy says). `faults` injects infrastructure failures: "setup" (502 on start),
"lose" (502 on every step), "die" (the server shuts down right after starting an episode),
"slow" (start takes 3 s, holding the sandbox's lock: a DELETE meanwhile waits for it, as the
real server's waits for the setup), "slow_release" (a release takes 1 s; `releasing` is set
meanwhile).
"""

from __future__ import annotations

import base64
import io
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

from bench.testing.http import episode_api_handler

TOKEN = "test-token"


def screen_png(step: int) -> str:
    img = Image.new("RGB", (112, 84), ((step * 40) % 256, 90, 160))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (an episode timeout) is expected in these tests


class LoopbackSandbox:
    def __init__(self, faults: set[str] | None = None) -> None:
        self.faults = faults or set()
        self.ready = True
        self.episode: dict[str, Any] | None = None
        self.started = 0
        self.released = 0
        self.releasing = threading.Event()
        self.released_once = threading.Event()
        self.steps: list[Any] = []
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackSandbox:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        def readyz() -> tuple[int, dict[str, Any]]:
            return 200 if self.ready else 503, {"ready": self.ready, "busy": False}

        return episode_api_handler(TOKEN, readyz, self.handle)

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if method == "POST" and path == "/episodes":
                return self._start(body)
            if self.episode is None or not path.startswith(f"/episodes/{self.episode['id']}"):
                return 404, {"detail": "unknown episode", "reason": "UnknownEpisode"}
            if method == "DELETE":
                if "slow_release" in self.faults:
                    self.releasing.set()
                    time.sleep(1)
                self.episode, self.released = None, self.released + 1
                self.released_once.set()
                return 200, {"reset_seconds": 0.0, "clean": True}
            if path.endswith("/step"):
                return self._step(body)
            if path.endswith("/evaluate"):
                ep = self.episode
                if ep["task"]["evaluator"]["func"] == "coin":
                    return 200, {"score": float(self.started % 2), "details": {}}
                expected = ep["task"]["evaluator"].get("expected", 1)
                score = 1.0 if ep["done"] and ep["actions"] >= expected else 0.0
                return 200, {"score": score, "details": {"actions": ep["actions"]}}
        return 404, {"detail": "no route", "reason": "NotFound"}

    def _start(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.episode is not None:
            return 409, {"detail": "busy", "reason": "SandboxBusy"}
        if "setup" in self.faults:
            return 502, {"detail": "setup step 1 failed", "reason": "SetupFailed"}
        self.started += 1
        eid = body.get("episode_id") or f"ep-{uuid.uuid4().hex[:8]}"
        self.episode = {"id": eid, "task": body["task"], "actions": 0, "done": False}
        if "die" in self.faults:  # answer this request, then go away like a killed sandbox
            threading.Thread(target=self._die, daemon=True).start()
        if "slow" in self.faults:
            time.sleep(3)
        obs = {"screenshot": screen_png(0), "format": "png", "width": 112, "height": 84, "step": 0}
        return 201, {
            "episode_id": eid,
            "instruction": body["task"]["instruction"],
            "observation": obs,
        }

    def _die(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _step(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if "lose" in self.faults:
            return 502, {"detail": "desktop unreachable", "reason": "DesktopError"}
        ep = self.episode
        assert ep is not None
        self.steps.append(body["action"])
        if body["action"] in ("DONE", "FAIL"):
            ep["done"] = True
        elif body["action"] != "WAIT":
            ep["actions"] += 1
        n = ep["actions"]
        obs = {"screenshot": screen_png(n), "format": "png", "width": 112, "height": 84, "step": n}
        return 200, {"observation": obs, "done": ep["done"], "info": {}}


def task(task_id: str, func: str = "coin", expected: int = 1) -> dict[str, Any]:
    return {
        "id": task_id,
        "instruction": f"Click {expected} time(s), then say DONE.",
        "config": [],
        "evaluator": {"func": func, "expected": expected},
    }
