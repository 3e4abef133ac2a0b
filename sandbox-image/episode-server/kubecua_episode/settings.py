"""Episode server settings, from KUBECUA_* environment variables (the launcher and the image set
them). One dataclass, no config framework: the server has a dozen knobs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1024 * 1024


def read_token(env: dict[str, str]) -> str:
    """KUBECUA_SANDBOX_TOKEN, else the file named by KUBECUA_SANDBOX_TOKEN_FILE (a mounted
    Secret). Empty means no token: the server then refuses to start (see app.build_app)."""
    token = env.get("KUBECUA_SANDBOX_TOKEN", "")
    path = env.get("KUBECUA_SANDBOX_TOKEN_FILE", "")
    if not token and path:
        token = Path(path).read_text().strip()
    return token


@dataclass
class Settings:
    token: str
    desktop_host: str = "127.0.0.1"
    desktop_port: int = 5000
    cdp_port: int = 9222
    vlc_port: int = 8080
    display: str = ":0"  # the desktop's X display; reset kills processes on it
    home: Path | None = None  # the desktop user's home, restored from `pristine_home` on reset
    pristine_home: Path | None = None
    cache_dir: Path = field(default_factory=lambda: Path("/tmp/kubecua-episode-cache"))
    max_body_bytes: int = 4 * MiB
    setup_timeout_s: float = 180.0
    step_timeout_s: float = 120.0
    evaluate_timeout_s: float = 180.0
    reset_timeout_s: float = 60.0
    # An episode with no call for this long is released (0: never). A trainer that died
    # mid-episode would otherwise leave the sandbox busy (409) for good.
    idle_timeout_s: float = 600.0
    screen_width: int = 1920
    screen_height: int = 1080
    client_password: str = "password"  # OSWorld convention: user `user`, password `password`

    @property
    def desktop_url(self) -> str:
        return f"http://{self.desktop_host}:{self.desktop_port}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = dict(os.environ if env is None else env)

        def path(name: str) -> Path | None:
            return Path(e[name]) if e.get(name) else None

        return cls(
            token=read_token(e),
            desktop_host=e.get("KUBECUA_DESKTOP_HOST", "127.0.0.1"),
            desktop_port=int(e.get("KUBECUA_DESKTOP_PORT", "5000")),
            cdp_port=int(e.get("KUBECUA_CDP_PORT", "9222")),
            vlc_port=int(e.get("KUBECUA_VLC_PORT", "8080")),
            display=e.get("KUBECUA_DISPLAY", ":0"),
            home=path("KUBECUA_HOME"),
            pristine_home=path("KUBECUA_PRISTINE_HOME"),
            cache_dir=path("KUBECUA_CACHE_DIR") or Path("/tmp/kubecua-episode-cache"),
            max_body_bytes=int(e.get("KUBECUA_MAX_BODY_BYTES", str(4 * MiB))),
            idle_timeout_s=float(e.get("KUBECUA_IDLE_TIMEOUT_SECONDS", "600")),
        )
