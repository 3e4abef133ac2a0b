"""OSWorld's start state (osworld_start_state.toml beside this file) applied to a session:
GNOME settings into the user's dconf database, the sound server's volume, VLC's and LibreOffice's
configuration, and Chrome's first-run files. Chrome's profile itself is chrome_profile.py.

Applied on every session start, before the episode server takes its baseline, so a fresh desktop
and every reset start from it."""

from __future__ import annotations

import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kubecua_desktop.session.procs import SessionError

PROFILE = Path(__file__).resolve().parent / "osworld_start_state.toml"
FULL_VOLUME = 65536  # PulseAudio's 100%: pactl's percent is raw / 65536


@dataclass(frozen=True)
class Setting:
    schema: str
    key: str
    value: str  # GVariant text, as `gsettings get` prints it


@cache
def load() -> dict[str, Any]:
    with PROFILE.open("rb") as f:
        return tomllib.load(f)


def dconf_settings() -> list[Setting]:
    return [Setting(e["schema"], e["key"], e["value"]) for e in load()["dconf"]]


def volume_raw() -> int:
    return FULL_VOLUME * int(load()["audio"]["volume_percent"]) // 100


def pulse_commands(sink: str) -> list[str]:
    """Lines for PulseAudio's start-up script: the sink's volume and mute as the profile says."""
    audio = load()["audio"]
    return [f"set-sink-volume {sink} {volume_raw()}",
            f"set-sink-mute {sink} {'1' if audio['mute'] else '0'}"]  # fmt: skip


VLC_SECTIONS = ("qt", "core", "lua")


def vlc_settings() -> dict[str, str]:
    """The profile's vlcrc options, whatever their section."""
    return {k: v for section in VLC_SECTIONS for k, v in load()["vlc"][section].items()}


def vlcrc(host: str, port: int) -> str:
    """~/.config/vlc/vlcrc, in VLC's own sections. VLC reads options by their full names
    (http-port, not [http] port), and its web interface refuses to start without http-password."""
    sections = {name: dict(load()["vlc"][name]) for name in VLC_SECTIONS}
    sections["core"].update({"http-host": host, "http-port": str(port)})
    return "".join(f"[{name}]\n" + "".join(f"{k}={v}\n" for k, v in options.items())
                   for name, options in sections.items())  # fmt: skip


def windows() -> list[dict[str, Any]]:
    """[[window]]: each app's first window as a task's setup opens it (state, class, launch)."""
    return [dict(e) for e in load()["window"]]


def window(app: str) -> dict[str, Any]:
    found = [e for e in windows() if e["app"] == app]
    if len(found) != 1:
        raise KeyError(f"osworld_start_state.toml has {len(found)} [[window]] entries for {app!r}")
    return found[0]


def libreoffice_items() -> list[tuple[str, str, str]]:
    return [(e["path"], e["name"], e["value"]) for e in load()["libreoffice"]]


def apply_dconf(env: Mapping[str, str]) -> None:
    """Writes every GNOME setting of the profile through gsettings (the session's D-Bus and
    dconf database). A schema that is not installed is an error: a task reading that key with
    gsettings would fail on this desktop."""
    for s in dconf_settings():
        argv = ["gsettings", "set", s.schema, s.key, s.value]
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise SessionError(
                f"{' '.join(argv)}: {done.stderr.strip()} (the schemas' packages "
                "are in sandbox-image/install/apt-packages.txt: make setup-apt)"
            )


def chrome_first_run(home: Path) -> None:
    """A Chrome past its first run, with the keyring file OSWorld's set-up leaves."""
    user_data = home / ".config/google-chrome"
    user_data.mkdir(parents=True, exist_ok=True)
    (user_data / "First Run").touch()
    keyring = home / ".local/share/keyrings/login.keyring"
    keyring.parent.mkdir(parents=True, exist_ok=True)
    keyring.touch()
