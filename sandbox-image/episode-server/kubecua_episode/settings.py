"""Episode server settings, from KUBECUA_* environment variables (the launcher and the image set
them). One dataclass, no config framework: the server has a dozen knobs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MiB = 1024 * 1024
LINUX = ("ubuntu", "debian", "linux")


class SettingsError(ValueError):
    """A KUBECUA_* variable is malformed; the message names it."""


def parse_url(name: str, value: str, default_port: int) -> tuple[str, int]:
    """http://host[:port] -> (host, port); anything else raises SettingsError naming `name`.

    >>> parse_url("KUBECUA_DESKTOP_URL", "http://sb-0-desktop.ns.svc:5000", 5000)
    ('sb-0-desktop.ns.svc', 5000)
    """
    try:
        url = urlsplit(value)
        port = url.port or default_port
    except ValueError as e:
        raise SettingsError(f"{name}={value!r}: {e}") from e
    if url.scheme != "http" or not url.hostname or url.path not in ("", "/"):
        raise SettingsError(f"{name}={value!r}: expected http://host[:port], no path")
    return url.hostname, port


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
    # A directory only the sandbox's apps use (the image's /tmp): reset removes what episodes
    # left there. Unset for local sandboxes, which share the host's /tmp.
    scratch_dir: Path | None = None
    # Outside the home (kubecua_episode/system.py): trees walked at each reset (new entries
    # removed, changes restored from a copy or reported), those kept as a byte copy, directories
    # whose new direct entries are removed (a new /data), and paths left alone. Empty: off.
    system_paths: tuple[Path, ...] = ()
    system_copies: tuple[Path, ...] = ()
    system_top: tuple[Path, ...] = ()
    system_exclude: tuple[Path, ...] = ()
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
    # Remote desktop (a VM, KUBECUA_DESKTOP_URL): no local display or home; reset closes the
    # episode's windows through the desktop API and cannot restore the home (see reset.py).
    remote: bool = False

    @property
    def desktop_url(self) -> str:
        return f"http://{self.desktop_host}:{self.desktop_port}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = dict(os.environ if env is None else env)

        def path(name: str) -> Path | None:
            return Path(e[name]) if e.get(name) else None

        kw: dict[str, Any] = dict(
            token=read_token(e),
            desktop_host=e.get("KUBECUA_DESKTOP_HOST", "127.0.0.1"),
            desktop_port=int(e.get("KUBECUA_DESKTOP_PORT", "5000")),
            cdp_port=int(e.get("KUBECUA_CDP_PORT", "9222")),
            vlc_port=int(e.get("KUBECUA_VLC_PORT", "8080")),
            display=e.get("KUBECUA_DISPLAY", ":0"),
            home=path("KUBECUA_HOME"),
            pristine_home=path("KUBECUA_PRISTINE_HOME"),
            scratch_dir=path("KUBECUA_SCRATCH_DIR"),
            system_paths=paths(e, "KUBECUA_SYSTEM_PATHS"),
            system_copies=paths(e, "KUBECUA_SYSTEM_COPIES"),
            system_top=paths(e, "KUBECUA_SYSTEM_TOP"),
            system_exclude=paths(e, "KUBECUA_SYSTEM_EXCLUDE"),
            cache_dir=path("KUBECUA_CACHE_DIR") or Path("/tmp/kubecua-episode-cache"),
            max_body_bytes=int(e.get("KUBECUA_MAX_BODY_BYTES", str(4 * MiB))),
            idle_timeout_s=float(e.get("KUBECUA_IDLE_TIMEOUT_SECONDS", "600")),
        )
        for copy in kw["system_copies"]:
            if not any(copy == r or r in copy.parents for r in kw["system_paths"]):
                raise SettingsError(
                    f"KUBECUA_SYSTEM_COPIES: {copy} is not inside any of KUBECUA_SYSTEM_PATHS "
                    "(only walked trees are restored)"
                )
        if e.get("KUBECUA_DESKTOP_URL"):
            kw.update(_remote(e))
        return cls(**kw)


def paths(e: dict[str, str], name: str) -> tuple[Path, ...]:
    """A colon-separated list of absolute paths, normalized; empty or unset: none.

    >>> paths({"KUBECUA_SYSTEM_PATHS": "/etc:/opt/"}, "KUBECUA_SYSTEM_PATHS")
    (PosixPath('/etc'), PosixPath('/opt'))
    """
    found = []
    for part in filter(None, e.get(name, "").split(":")):
        if not part.startswith("/") or os.path.normpath(part) != (part.rstrip("/") or "/"):
            raise SettingsError(f"{name}={e[name]!r}: {part!r} is not an absolute, normalized path")
        found.append(Path(os.path.normpath(part)))
    return tuple(found)


def _remote(e: dict[str, str]) -> dict[str, Any]:
    """KUBECUA_DESKTOP_URL (+ KUBECUA_CDP_URL, KUBECUA_VLC_URL, KUBECUA_DESKTOP_OS), as the
    operator's kubevirt backend sets them. desktop-env reaches every service through one host
    (its vm_ip), so CDP and VLC must live on the desktop's host; only their ports may differ."""
    host, port = parse_url("KUBECUA_DESKTOP_URL", e["KUBECUA_DESKTOP_URL"], 5000)
    ports = {}
    for name, key, default in (("KUBECUA_CDP_URL", "cdp_port", 9222),
                               ("KUBECUA_VLC_URL", "vlc_port", 8080)):  # fmt: skip
        other, ports[key] = parse_url(name, e.get(name) or f"http://{host}", default)
        if other != host:
            why = "desktop-env reaches all services on one host"
            raise SettingsError(f"{name}: host {other!r} is not KUBECUA_DESKTOP_URL's; {why}")
    os_name = e.get("KUBECUA_DESKTOP_OS", "Ubuntu")
    if os_name.lower() not in LINUX:
        raise SettingsError(f"KUBECUA_DESKTOP_OS={os_name!r}: only Linux desktops are supported")
    return {"desktop_host": host, "desktop_port": port, "remote": True, "home": None,
            "pristine_home": None, "system_paths": (), "system_copies": (), "system_top": (),
            **ports}  # fmt: skip
