"""What a desktop session is started with: display, size, ports, home, auth.

Its own module because both the session (session.py) and the home it prepares (setup_home.py) read
it; with it in session.py the two imported each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SessionConfig:
    display: int | None = None  # None: Xvfb picks a free one
    width: int = 1920
    height: int = 1080
    host: str = "127.0.0.1"
    port: int = 5000
    cdp_port: int = 9222
    vlc_port: int = 8080
    # Where VLC's web interface listens: loopback where the episode server shares the host or
    # pod, every address in a VM (the episode server reaches it from outside).
    vlc_host: str = "127.0.0.1"
    home: Path = field(default_factory=lambda: Path.home())
    token: str | None = None
    trust_loopback: bool = False
    start_timeout_s: float = 60.0
    # XDG_RUNTIME_DIR (the session bus lives in it); None: a fresh temporary dir, removed at stop.
    # The image passes /run/user/1000 so the bus sits where OSWorld's tasks expect it.
    runtime_dir: Path | None = None
