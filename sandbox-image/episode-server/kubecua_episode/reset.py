"""Resetting a container/local desktop between episodes, without restarting it:

1. kill the session's apps: every process on the desktop's X display that was not there when the
   server took its baseline (Xvfb, window manager, D-Bus, desktop server stay);
2. restore the home directory from its pristine copy (files a task created or changed go away);
3. verify: no stray processes, home equals the pristine copy, no windows beyond the baseline.

This needs the episode server on the same host (pod) as the desktop, which is how the image and
the local launcher run it. VMs are reset by their backend (VMI restart), not here."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil


def _on_display(proc: psutil.Process, display: str) -> bool:
    try:
        return proc.environ().get("DISPLAY") == display
    except (psutil.Error, OSError):
        return False


# Session services that D-Bus starts on demand (the first AT-SPI or gsettings client): part of the
# desktop, not of an episode. Killing them costs a second per reset and they come back anyway.
SESSION_SERVICES = frozenset({
    "at-spi2-registryd", "at-spi-bus-launcher", "dbus-daemon", "dconf-service", "gvfsd",
    "xdg-permission-store", "xdg-document-portal", "xdg-desktop-portal",
})  # fmt: skip


def _is_service(proc: psutil.Process) -> bool:
    try:
        return proc.name() in SESSION_SERVICES
    except psutil.Error:
        return False


def display_processes(display: str) -> set[int]:
    """Processes on the X display and all their descendants, the episode server and session
    services excepted. Descendants count because Chromium rewrites its own environment block
    (setproctitle), so its DISPLAY can no longer be read from /proc."""
    me = os.getpid()
    procs = {p.pid: p for p in psutil.process_iter()}
    found = {pid for pid, p in procs.items() if _on_display(p, display)}
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        with contextlib.suppress(psutil.Error):
            children.setdefault(p.ppid(), []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if pid != me and not _is_service(procs[pid])}


def kill_new_processes(display: str, baseline: set[int], timeout: float = 5.0) -> list[str]:
    """SIGTERM, then SIGKILL after `timeout`, every non-baseline process on the display.
    Returns the names of the processes it stopped."""
    victims = []
    for pid in display_processes(display) - baseline:
        try:
            victims.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    names = []
    for p in victims:
        with contextlib.suppress(psutil.Error):
            names.append(p.name())
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(victims, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return names


def _snapshot(root: Path) -> dict[str, tuple[int, bool]]:
    """relative path -> (size, is_dir); symlinks are listed, not followed."""
    out: dict[str, tuple[int, bool]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            out[str(path.relative_to(root))] = (0 if path.is_dir() else st.st_size, path.is_dir())
    return out


def restore_home(home: Path, pristine: Path) -> None:
    """Make `home` a copy of `pristine`, keeping the home directory inode (processes that hold
    it as cwd, such as the desktop server, keep working)."""
    for entry in home.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    shutil.copytree(pristine, home, symlinks=True, dirs_exist_ok=True)


def homes_differ(home: Path, pristine: Path) -> list[str]:
    a, b = _snapshot(home), _snapshot(pristine)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))[:10]


@dataclass
class Resetter:
    display: str
    home: Path | None
    pristine: Path | None
    baseline: set[int] = field(default_factory=set)
    killed: list[str] = field(default_factory=list)  # by the last reset, for the log

    def take_baseline(self) -> None:
        self.baseline = display_processes(self.display)

    def reset(self) -> tuple[float, list[str]]:
        """Returns (seconds, problems). No problems means verified clean."""
        start = time.monotonic()
        self.killed = kill_new_processes(self.display, self.baseline)
        if self.home and self.pristine:
            restore_home(self.home, self.pristine)
        return time.monotonic() - start, self.problems()

    def problems(self) -> list[str]:
        found = []
        stray = display_processes(self.display) - self.baseline
        if stray:
            found.append(f"processes still on {self.display}: {sorted(stray)[:10]}")
        gone = {p for p in self.baseline if not psutil.pid_exists(p)}
        if gone:
            found.append(f"session processes died: {sorted(gone)}")
        if self.home and self.pristine:
            diff = homes_differ(self.home, self.pristine)
            if diff:
                found.append(f"home differs from pristine: {diff}")
        return found
