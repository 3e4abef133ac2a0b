"""PulseAudio's state across episodes. The sound server is part of the desktop and keeps its
sinks' volume and mute in memory (restoring the home does not touch them), so a reset puts back
what the baseline saw: the default sink, its volume (raw, per channel) and its mute. Done
through the desktop API with pactl, as a user would; a desktop without a sound server has
nothing to restore."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Protocol

PROBE = (
    "pactl get-default-sink && pactl get-sink-volume @DEFAULT_SINK@ "
    "&& pactl get-sink-mute @DEFAULT_SINK@"
)


class CommandDesktop(Protocol):
    def execute(self, command: list[str] | str, shell: bool = False) -> dict[str, Any]: ...


@dataclass(frozen=True)
class AudioState:
    sink: str
    volumes: tuple[str, ...]  # raw per-channel values, e.g. ("65536", "65536")
    mute: str  # "yes" | "no"

    @classmethod
    def read(cls, desktop: CommandDesktop) -> AudioState | None:
        """None when the desktop has no sound server (or no pactl)."""
        out = desktop.execute(PROBE, shell=True)
        if out.get("returncode", 1) != 0:
            return None
        lines = str(out.get("output", "")).splitlines()
        mute = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Mute:")), "")
        volumes = tuple(re.findall(r":\s*(\d+)\s*/\s*\d+%", "\n".join(lines)))
        if not lines or not volumes or mute not in ("yes", "no"):
            return None
        return cls(lines[0].strip(), volumes, mute)

    def restore(self, desktop: CommandDesktop) -> list[str]:
        """Problems (empty when the sound server is back to this state)."""
        sink = shlex.quote(self.sink)
        cmd = (
            f"pactl set-default-sink {sink} && pactl set-sink-mute {sink} {self.mute} "
            f"&& pactl set-sink-volume {sink} {' '.join(self.volumes)}"
        )
        out = desktop.execute(cmd, shell=True)
        if out.get("returncode", 1) != 0:
            return [
                f"sound server not restored: {str(out.get('error') or out.get('output'))[:300]}"
            ]
        if AudioState.read(desktop) != self:
            return ["sound server not restored: its state differs from the baseline"]
        return []
