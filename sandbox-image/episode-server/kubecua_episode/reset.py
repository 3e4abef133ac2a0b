"""Resetting a container/local desktop between episodes, without restarting it:

1. kill the session's apps: every process on the desktop's X display that was not there when the
   server took its baseline (Xvfb, window manager, D-Bus, desktop server stay);
2. restore the home directory from its pristine copy (files a task created or changed go away);
3. undo what the episode changed outside the home, with sudo or not (system.py: /etc, /opt,
   new top-level folders; the scope is the settings' KUBECUA_SYSTEM_*);
4. verify: no stray processes, home equals the pristine copy, the tracked system paths equal
   their baseline, no windows beyond the baseline.

This needs the episode server on the same host (pod) as the desktop, which is how the image and
the local launcher run it. With a remote desktop (a VM; the image's `episode-server` mode) only
the desktop API is in reach: RemoteResetter closes the windows the episode opened and verifies
none remain. It cannot restore the home or stop windowless processes; restarting the VM is the
operator's job."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from kubecua_episode.system import SudoSystemState, SystemState


def _on_display(proc: psutil.Process, display: str) -> bool:
    try:
        return proc.environ().get("DISPLAY") == display
    except (psutil.Error, OSError):
        return False


# The accessibility bus (AT-SPI): part of the desktop, holds no user state, and apps register with
# it as they start. Kept across resets, with the session bus itself, and gvfsd (GIO's virtual
# file systems; kept as before: with it restarted on every reset a LibreOffice save task failed
# in the suite, cause not pinned down).
SESSION_SERVICES = frozenset({"at-spi2-registryd", "at-spi-bus-launcher", "dbus-daemon", "gvfsd"})


# The desktop server's warm pyautogui executor (kubecua_desktop.warm): the zygote is part of the
# desktop. Its children (the spare it pre-forks for the next action, actions, and whatever they
# fork) carry the same command line but belong to episodes: a reset kills them (a killed spare
# is forked again on the next action) and the baseline leaves them out, since a spare is
# replaced after every action.
ZYGOTE = "kubecua_desktop.zygote"


def _zygote_role(proc: psutil.Process) -> str:
    """Its role: "zygote" (started by the desktop server), "child" (anything else with its command
    line: spares, actions, what they fork, orphans of those) or ""."""
    try:
        if ZYGOTE not in proc.cmdline():
            return ""
        parent_proc = proc.parent()
        parent = " ".join(parent_proc.cmdline()) if parent_proc is not None else ""
        return "zygote" if "kubecua_desktop" in parent and ZYGOTE not in parent else "child"
    except psutil.Error:
        return ""


def _zygote_child(pid: int) -> bool:
    try:
        return _zygote_role(psutil.Process(pid)) == "child"
    except psutil.Error:
        return False


def _is_service(proc: psutil.Process) -> bool:
    try:
        return proc.name() in SESSION_SERVICES or _zygote_role(proc) == "zygote"
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
    found -= {p.pid for p in bus_services(display)}  # restarted by every reset, not episode state
    return {pid for pid in found if pid != me and not _is_service(procs[pid])}


def _bus_activated(proc: psutil.Process, display: str) -> bool:
    """Started by the session bus on demand: D-Bus marks those with DBUS_STARTER_BUS_TYPE (their
    parent is not the bus, which spawns them through a helper that exits)."""
    try:
        env = proc.environ()
        return env.get("DBUS_STARTER_BUS_TYPE") == "session" and env.get("DISPLAY") == display
    except (psutil.Error, OSError):
        return False


def bus_services(display: str) -> list[psutil.Process]:
    """What the session bus started on demand (dconf-service, portals, keyrings), with
    their descendants. They hold user state in memory: dconf-service keeps its own copy of the
    settings database and writes all of it back on the next change, so restoring the database
    file underneath a running one brings an earlier episode's settings back and drops a write
    that repeats one. A reset stops them; the bus starts fresh ones on the next call."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.name() not in SESSION_SERVICES and _bus_activated(proc, display):
                found[proc.pid] = proc
                found.update((c.pid, c) for c in proc.children(recursive=True))
    return list(found.values())


def stop(victims: list[psutil.Process], timeout: float = 5.0) -> list[str]:
    """SIGTERM, then SIGKILL after `timeout`. Returns the names of the processes stopped."""
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


def kill_new_processes(display: str, baseline: set[int], timeout: float = 5.0) -> list[str]:
    """Stops every non-baseline process on the display; returns their names."""
    victims = []
    for pid in display_processes(display) - baseline:
        try:
            victims.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return stop(victims, timeout)


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
    it as cwd, such as the desktop server, keep working). The copies belong to the home's owner
    (a root episode server restores the home of a local sandbox's unprivileged desktop user)."""
    for entry in home.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    shutil.copytree(pristine, home, symlinks=True, dirs_exist_ok=True)
    owner = home.stat()
    if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, os.getegid()):
        chown_below(home, owner.st_uid, owner.st_gid)


def chown_below(root: Path, uid: int, gid: int) -> None:
    """Give everything under root (not root itself; links themselves, not their targets) to uid."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def remove_new_entries(directory: Path, keep: set[str]) -> None:
    """Remove what an episode left in `directory`: top-level entries not in `keep`, except the
    sandbox's own (kubecua*: a desktop server restarted by supervisord makes a new zygote dir)."""
    for entry in directory.iterdir():
        if entry.name in keep or entry.name.startswith("kubecua"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


def homes_differ(home: Path, pristine: Path) -> list[str]:
    a, b = _snapshot(home), _snapshot(pristine)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))[:10]


@dataclass
class Resetter:
    display: str
    home: Path | None
    pristine: Path | None
    # A directory apps share with nothing else (the image's /tmp): entries made after the
    # baseline are removed by every reset. A local sandbox shares the host's /tmp, so None.
    scratch: Path | None = None
    # Off unless given a scope; through sudo where the server is not root (system.py).
    system: SystemState | SudoSystemState = field(default_factory=SystemState)
    baseline: set[int] = field(default_factory=set)
    scratch_baseline: set[str] = field(default_factory=set)
    killed: list[str] = field(default_factory=list)  # by the last reset, for the log

    def take_baseline(self) -> list[str]:
        procs = display_processes(self.display)
        self.baseline = {p for p in procs if not _zygote_child(p)}
        if self.scratch is not None:
            self.scratch_baseline = {e.name for e in self.scratch.iterdir()}
        return self.system.take_baseline() if self.system.enabled else []

    def reset(self) -> tuple[float, list[str]]:
        """Returns (seconds, problems). No problems means verified clean."""
        start = time.monotonic()
        self.killed = kill_new_processes(self.display, self.baseline)
        self.killed += stop(bus_services(self.display))  # before the home (and its dconf db)
        if self.home and self.pristine:
            restore_home(self.home, self.pristine)
        if self.scratch is not None:
            remove_new_entries(self.scratch, self.scratch_baseline)
        if self.system.enabled:
            self.system.restore()
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
        if self.system.enabled:
            found += self.system.problems()
        return found


class WindowDesktop(Protocol):
    def execute(self, command: list[str] | str, shell: bool = False) -> dict[str, Any]: ...
    def window_ids(self) -> list[str]: ...


def window_pids(desktop: WindowDesktop) -> dict[str, int]:
    """window id -> owning pid from `wmctrl -lp` (0 when the app does not set _NET_WM_PID)."""
    out = str(desktop.execute(["wmctrl", "-lp"]).get("output", ""))
    rows = (line.split() for line in out.splitlines())
    return {r[0]: int(r[2]) for r in rows if len(r) > 2 and r[2].lstrip("-").isdigit()}


@dataclass
class RemoteResetter:
    """Reset of a desktop reached only through its API: close (WM_DELETE_WINDOW) every window
    that was not there at baseline, SIGKILL the owners of those that stay, verify none remain."""

    desktop: WindowDesktop
    close_wait_s: float = 3.0
    kill_wait_s: float = 5.0
    baseline: set[str] = field(default_factory=set)
    killed: list[str] = field(default_factory=list)  # window ids closed by the last reset

    def take_baseline(self) -> list[str]:
        """Problems that make a reset impossible (reported by /readyz as NotClean)."""
        if self.desktop.execute("command -v wmctrl", shell=True).get("returncode", 1) != 0:
            return ["wmctrl is missing on the desktop: windows cannot be closed between episodes"]
        self.baseline = set(self.desktop.window_ids())
        return []

    def _new(self) -> set[str]:
        return set(self.desktop.window_ids()) - self.baseline

    def _wait_gone(self, limit: float) -> set[str]:
        deadline = time.monotonic() + limit
        while (left := self._new()) and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the window list; wmctrl has no wait
        return left

    def reset(self) -> tuple[float, list[str]]:
        start = time.monotonic()
        self.killed = sorted(self._new())
        for wid in self.killed:
            self.desktop.execute(["wmctrl", "-i", "-c", wid])
        left = self._wait_gone(self.close_wait_s) if self.killed else set()
        if left:  # a "save changes?" dialog or a hung app: stop the owners, baseline's excepted
            pids = window_pids(self.desktop)
            keep = {pids.get(w) for w in self.baseline}
            victims = {pids[w] for w in left if pids.get(w) and pids[w] not in keep}
            if victims:
                self.desktop.execute(["kill", "-KILL", *map(str, sorted(victims))])
            left = self._wait_gone(self.kill_wait_s)
        problems = [f"windows still open: {sorted(left)}"] if left else []
        return time.monotonic() - start, problems
