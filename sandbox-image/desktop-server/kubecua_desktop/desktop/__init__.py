"""One Desktop class per platform behind one interface; routes never branch on the platform."""

from __future__ import annotations

import platform
from collections.abc import Callable

from kubecua_desktop.desktop.base import Desktop, DesktopUnavailable
from kubecua_desktop.settings import Settings


def _linux(settings: Settings) -> Desktop:
    from kubecua_desktop.desktop.linux import LinuxDesktop

    return LinuxDesktop(settings, settings.capture_backend)


FACTORIES: dict[str, Callable[[Settings], Desktop]] = {"Linux": _linux}


def make_desktop(settings: Settings) -> Desktop:
    """The Desktop for this machine's platform (Windows and macOS are not implemented yet)."""
    system = platform.system()
    if system not in FACTORIES:
        raise DesktopUnavailable(f"no desktop implementation for platform {system!r}")
    return FACTORIES[system](settings)


__all__ = ["Desktop", "DesktopUnavailable", "make_desktop"]
