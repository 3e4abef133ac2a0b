"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe):
commands as NUL-terminated JSON on fd 3, answers and events on fd 4. No WebSocket client and no
driver package: Debian's chromium is all it needs. Enough for the live-view test: open a page,
evaluate JavaScript, click at a point."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
# Root needs --no-sandbox; the rest stop Chromium's calls home, which this network refuses.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--window-size=1400,900", "--remote-debugging-pipe"]  # fmt: skip


class Browser:
    def __init__(self, profile: Path) -> None:
        to_chrome, self._to = os.pipe()  # Chromium reads commands on its fd 3
        self._from, from_chrome = os.pipe()  # and writes answers on its fd 4
        shell = f'exec "$0" "$@" 3<&{to_chrome} 4>&{from_chrome}'
        self.proc = subprocess.Popen(
            ["bash", "-c", shell, str(CHROMIUM), *ARGS, f"--user-data-dir={profile}"],
            pass_fds=(to_chrome, from_chrome), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer = b""
        self._next = 0
        self.session: str | None = None

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        """One command (on the page's session once open()ed); its result, or an error raised."""
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise TimeoutError("no answer from Chromium")
            self._buffer += os.read(self._from, 1 << 16)
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(raw))

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                      clickCount=1)  # fmt: skip

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to)
        os.close(self._from)
