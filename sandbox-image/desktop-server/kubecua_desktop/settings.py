"""Server settings, read from the environment (and a few CLI flags in __main__)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


class SettingsError(ValueError):
    """A setting is missing or inconsistent; the message says which and how to fix it."""


def read_token() -> str | None:
    """The token from KUBECUA_SANDBOX_TOKEN, else from the file KUBECUA_SANDBOX_TOKEN_FILE."""
    token = os.environ.get("KUBECUA_SANDBOX_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("KUBECUA_SANDBOX_TOKEN_FILE", "").strip()
    if path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise SettingsError(f"cannot read KUBECUA_SANDBOX_TOKEN_FILE={path}: {exc}") from exc
        if not token:
            raise SettingsError(f"KUBECUA_SANDBOX_TOKEN_FILE={path} is empty")
        return token
    return None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes"}


def _default_roots() -> list[Path]:
    raw = os.environ.get("KUBECUA_DESKTOP_FILE_ROOTS", "")
    if raw:
        return [Path(p) for p in raw.split(":") if p]
    return [Path.home(), Path("/tmp")]


@dataclass
class Settings:
    """Everything the server needs; defaults follow OSWorld's server."""

    host: str = "127.0.0.1"
    port: int = 5000
    token: str | None = field(default_factory=read_token)
    # Upstream desktop-env sends no Authorization header. With this on, clients on 127.0.0.1 (the
    # episode server in the same pod or host) need no token; every other client still does.
    trust_loopback: bool = field(
        default_factory=lambda: _env_flag("KUBECUA_DESKTOP_TRUST_LOOPBACK")
    )
    file_roots: list[Path] = field(default_factory=_default_roots)
    command_timeout_s: float = 120.0
    python_timeout_s: float = 30.0
    open_file_timeout_s: float = 60.0
    png_compress_level: int = 1  # 0 stores; 1..9 -> ISA-L level min(level, 2) (kubecua_desktop.png)
    # "xgetimage" skips MIT-SHM (kubecua_desktop.desktop.capture); "default" tries it first.
    capture_backend: str = field(
        default_factory=lambda: os.environ.get("KUBECUA_DESKTOP_CAPTURE", "default")
    )
    # /accessibility and /terminal run a helper under Debian's python3, which has pyatspi (apt).
    atspi_python: str = field(
        default_factory=lambda: os.environ.get("KUBECUA_ATSPI_PYTHON", "/usr/bin/python3")
    )
    # /run_python runs code with this interpreter; the session puts a python with pyautogui first.
    python: str = field(default_factory=lambda: os.environ.get("KUBECUA_DESKTOP_PYTHON", "python3"))
    # /execute's pyautogui actions run in a pre-forked warm python (kubecua_desktop.warm); "0"
    # turns that off and every action starts a fresh python again.
    warm_python: bool = field(
        default_factory=lambda: os.environ.get("KUBECUA_DESKTOP_WARM_PYTHON", "1") != "0"
    )
    recording_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("KUBECUA_RECORDING_DIR", "/tmp"))
    )

    def validate(self) -> None:
        if not self.token and not self.trust_loopback:
            raise SettingsError(
                "no bearer token: set KUBECUA_SANDBOX_TOKEN or KUBECUA_SANDBOX_TOKEN_FILE "
                "(or KUBECUA_DESKTOP_TRUST_LOOPBACK=1 to serve loopback clients only)"
            )
        if not 0 <= self.png_compress_level <= 9:
            raise SettingsError("png_compress_level must be 0..9")
