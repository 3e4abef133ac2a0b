"""The link to the desktop's OSWorld in-VM API (:5000). Blocking (requests); callers run it in a
worker thread. Also makes desktop-env's own controllers authenticate: they call `requests.get/post`
without headers, so `authorize_requests_to` adds the bearer token to every `requests` call whose
URL points at the desktop (and only there, so the token never leaks to another host)."""

from __future__ import annotations

import functools
import io
from typing import Any

import requests
from PIL import Image

_installed: dict[str, str] = {}


def authorize_requests_to(base_url: str, token: str) -> None:
    """Add `Authorization: Bearer token` to requests.Session calls under base_url. Idempotent."""
    _installed[base_url.rstrip("/")] = token
    original = requests.Session.request
    if getattr(original, "_kubecua_auth", False):
        return

    @functools.wraps(original)
    def request(self: requests.Session, method: str, url: str, *args: Any, **kw: Any) -> Any:
        for prefix, tok in _installed.items():
            if str(url).startswith(prefix + "/"):
                headers = dict(kw.pop("headers", None) or {})
                headers.setdefault("Authorization", f"Bearer {tok}")
                kw["headers"] = headers
        return original(self, method, url, *args, **kw)

    request._kubecua_auth = True  # type: ignore[attr-defined]
    requests.Session.request = request  # type: ignore[method-assign,assignment]


class DesktopError(RuntimeError):
    """The desktop did not answer or answered with an error."""


class Desktop:
    def __init__(self, base_url: str, token: str, timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = requests.Session()
        self._http.headers["Authorization"] = f"Bearer {token}"

    def _post(self, path: str, timeout: float | None = None, **kw: Any) -> requests.Response:
        try:
            resp = self._http.post(self.base_url + path, timeout=timeout or self.timeout, **kw)
        except requests.RequestException as e:
            raise DesktopError(f"POST {path}: {e}") from e
        if resp.status_code >= 400:
            raise DesktopError(f"POST {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp

    def fresh_connections(self) -> None:
        """Drop kept-alive connections. A VM desktop restored from a snapshot between episodes
        (kubecua_episode.vm) knows none made after the snapshot: its first answer on one would be
        a closed connection."""
        self._http.close()  # the session stays usable; it opens new connections on demand

    def screenshot_png(self, timeout: float = 10.0) -> bytes:
        try:
            resp = self._http.get(self.base_url + "/screenshot", timeout=timeout)
        except requests.RequestException as e:
            raise DesktopError(f"GET /screenshot: {e}") from e
        if resp.status_code != 200 or not resp.content.startswith(b"\x89PNG"):
            raise DesktopError(f"GET /screenshot: HTTP {resp.status_code}")
        return resp.content

    def screenshot(self) -> Image.Image:
        return Image.open(io.BytesIO(self.screenshot_png()))

    def execute(self, command: list[str] | str, shell: bool = False) -> dict[str, Any]:
        body = self._post("/execute", json={"command": command, "shell": shell}).json()
        return dict(body)

    def run_python(self, code: str) -> dict[str, Any]:
        return dict(self._post("/run_python", json={"code": code}, timeout=40).json())

    def get_text(self, path: str) -> str:
        """GET-like GET /accessibility or /terminal: returns the named field or ''."""
        try:
            resp = self._http.get(self.base_url + path, timeout=self.timeout)
            body = resp.json() if resp.status_code == 200 else {}
        except (requests.RequestException, ValueError):
            return ""
        return str(body.get("AT") or body.get("output") or "")

    def window_ids(self) -> list[str]:
        """Top-level managed windows, from wmctrl (OSWorld's images ship it)."""
        out = self.execute(["wmctrl", "-l"])
        return [line.split()[0] for line in str(out.get("output", "")).splitlines() if line]


def is_black(image: Image.Image, threshold: int = 8) -> bool:
    """A screen is 'black' when no pixel is brighter than threshold (OSWorld #355).

    >>> is_black(Image.new("RGB", (4, 4))), is_black(Image.new("RGB", (4, 4), (0, 0, 40)))
    (True, False)
    """
    _, brightest = image.convert("L").getextrema()
    return float(brightest) <= threshold  # type: ignore[arg-type]
