"""The interface every platform's desktop implements (X11 on Linux today)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from PIL import Image


class DesktopUnavailable(RuntimeError):
    """A desktop facility is missing (no display, no AT-SPI, ...); routes answer 503."""


class Desktop(ABC):
    """What the API needs from a desktop. All methods block; call them from worker threads."""

    platform_name: str

    @abstractmethod
    def screenshot(self) -> Image.Image:
        """The full screen as RGB, with the mouse cursor drawn in."""

    @abstractmethod
    def screen_size(self) -> tuple[int, int]: ...

    @abstractmethod
    def cursor_position(self) -> tuple[int, int]: ...

    @abstractmethod
    def window_size(self, app_class_name: str) -> tuple[int, int] | None:
        """Size of the first top-level window whose class matches (case-insensitive), or None."""

    @abstractmethod
    def window_titles(self) -> list[str]: ...

    @abstractmethod
    def activate_window(self, name: str, strict: bool, by_class: bool) -> bool: ...

    @abstractmethod
    def close_window(self, name: str, strict: bool, by_class: bool) -> bool: ...

    @abstractmethod
    def accessibility_tree(self) -> str:
        """OSWorld's XML accessibility tree of the whole desktop."""

    @abstractmethod
    def terminal_output(self) -> str | None:
        """Text of the focused terminal in the active terminal window, or None."""

    @abstractmethod
    def wallpaper_path(self) -> Path | None: ...

    @abstractmethod
    def set_wallpaper(self, path: Path) -> None: ...

    @abstractmethod
    def open_command(self, path: Path) -> list[str]:
        """The command that opens a file with its default application."""

    @abstractmethod
    def recording_command(self, output: Path) -> list[str]:
        """An ffmpeg (or similar) command that records the screen to output until SIGINT."""

    def desktop_path(self) -> Path:
        return Path.home() / "Desktop"
