"""Episode server settings, from KUBECUA_* environment variables (the launcher and the image set
them), read by pydantic-settings; the token by the sandbox client's one reader."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, ValidationError, ValidationInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from kubecua_sandbox_client import TokenError, read_token

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


def colon_paths(value: Any, info: ValidationInfo) -> tuple[Path, ...]:
    """A colon-separated list of absolute paths, normalized; empty or unset: none.

    >>> Settings(token="t", system_paths="/etc:/opt/").system_paths
    (PosixPath('/etc'), PosixPath('/opt'))
    """
    if not isinstance(value, str):
        return tuple(value)
    found = []
    for part in filter(None, value.split(":")):
        if not part.startswith("/") or os.path.normpath(part) != (part.rstrip("/") or "/"):
            name = f"KUBECUA_{(info.field_name or '').upper()}"
            raise SettingsError(f"{name}={value!r}: {part!r} is not an absolute, normalized path")
        found.append(Path(os.path.normpath(part)))
    return tuple(found)


Paths = Annotated[tuple[Path, ...], NoDecode, BeforeValidator(colon_paths)]


class Settings(BaseSettings):
    """Each field F is read from KUBECUA_<F> (idle_timeout_s: KUBECUA_IDLE_TIMEOUT_SECONDS); an
    empty variable counts as unset. The token and the remote desktop are set by `from_env`."""

    model_config = SettingsConfigDict(
        env_prefix="KUBECUA_", env_ignore_empty=True, validate_by_name=True
    )

    token: str = ""
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
    system_paths: Paths = ()
    system_copies: Paths = ()
    system_top: Paths = ()
    system_exclude: Paths = ()
    cache_dir: Path = Path("/tmp/kubecua-episode-cache")
    max_body_bytes: int = 4 * MiB
    # An episode with no call for this long is released (0: never). A trainer that died
    # mid-episode would otherwise leave the sandbox busy (409) for good.
    idle_timeout_s: float = Field(600.0, validation_alias="KUBECUA_IDLE_TIMEOUT_SECONDS")
    # Remote desktop (a VM, KUBECUA_DESKTOP_URL): no local display or home; reset closes the
    # episode's windows through the desktop API and cannot restore the home (see reset.py).
    remote: bool = False
    # A VM desktop's runner (kubecua_episode.vm's control port, KUBECUA_VM_CONTROL_URL): reset
    # restores the VM's snapshot through it instead of closing windows (vm/restore.py).
    vm_control_url: str = ""
    # Not settings: OSWorld's conventions and this server's limits.
    setup_timeout_s: ClassVar[float] = 180.0
    step_timeout_s: ClassVar[float] = 120.0
    evaluate_timeout_s: ClassVar[float] = 180.0
    reset_timeout_s: ClassVar[float] = 60.0
    screen_width: ClassVar[int] = 1920
    screen_height: ClassVar[int] = 1080
    client_password: ClassVar[str] = "password"  # OSWorld: user `user`, password `password`

    @property
    def desktop_url(self) -> str:
        return f"http://{self.desktop_host}:{self.desktop_port}"

    @classmethod
    def from_env(cls) -> Settings:
        """From the process environment; SettingsError names the variable that is wrong."""
        env = os.environ
        try:
            kw: dict[str, Any] = {"token": read_token() or "", "remote": False}
            if env.get("KUBECUA_DESKTOP_URL"):
                kw.update(_remote(env))
            settings = cls(**kw)
        except TokenError as e:
            raise SettingsError(str(e)) from None
        except ValidationError as e:
            err = e.errors()[0]
            if isinstance(cause := err.get("ctx", {}).get("error"), SettingsError):
                raise SettingsError(str(cause)) from None
            loc = str(err["loc"][0])  # a field's name, or the variable it has as alias
            name = loc if loc.startswith("KUBECUA_") else f"KUBECUA_{loc.upper()}"
            raise SettingsError(f"{name}={err['input']!r}: {err['msg']}") from None
        if settings.vm_control_url and not settings.remote:
            raise SettingsError(
                "KUBECUA_VM_CONTROL_URL: a VM runner needs KUBECUA_DESKTOP_URL (the VM's desktop)"
            )
        for copy in settings.system_copies:
            if not any(copy == r or r in copy.parents for r in settings.system_paths):
                raise SettingsError(
                    f"KUBECUA_SYSTEM_COPIES: {copy} is not inside any of KUBECUA_SYSTEM_PATHS "
                    "(only walked trees are restored)"
                )
        return settings


def _remote(e: Mapping[str, str]) -> dict[str, Any]:
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
