"""The episode server's reset of a VM sandbox: its runner (`python -m kubecua_episode.vm`, beside
it in the pod) restores the snapshot taken once the VM was ready, instead of a clean-up in place.
Every byte of the desktop returns (dconf, the home, running apps, /tmp); the episode server then
verifies the window list against its baseline, as for any remote desktop.

A failed restore makes the runner quarantine the VM and rebuild it from its base; meanwhile the
runner's /healthz answers 503 and the sandbox is not ready. `recovered()` tells when the rebuilt
VM is ready again, so the sandbox takes a new baseline and serves again without a new pod (a
rebuild under qemu's emulator outlasts a release's time limit)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import httpx


class VmDesktop(Protocol):
    def window_ids(self) -> list[str]: ...

    def fresh_connections(self) -> None: ...


@dataclass
class SnapshotResetter:
    control_url: str  # the runner's control port, e.g. http://127.0.0.1:5100
    desktop: VmDesktop
    timeout_s: float = 600.0  # a failed restore answers only after the rebuild
    killed: list[str] = field(default_factory=list)  # nothing is killed: the snapshot returns
    baseline: set[str] = field(default_factory=set)
    _restoring: threading.Event = field(default_factory=threading.Event)

    def take_baseline(self) -> list[str]:
        """Problems until the runner has booted and snapshotted the VM: the baseline must be the
        snapshot's windows, and the sandbox takes it again once `recovered()`."""
        if why := self.runner_ready():
            return [why]
        self.baseline = set(self.desktop.window_ids())
        return []

    def runner_ready(self) -> str | None:
        """None when the runner's VM is ready (booted, snapshotted), else why not."""
        try:
            r = httpx.get(f"{self.control_url}/healthz", timeout=5.0)
        except httpx.HTTPError as e:
            return f"VmNotReady: the VM runner does not answer: {e}"
        if r.status_code != 200:
            state = r.json().get("state", "?") if r.content else "?"
            return f"VmNotReady: the VM is {state}"
        return None

    def reset(self) -> tuple[float, list[str]]:
        start = time.monotonic()
        self._restoring.set()
        try:
            r = httpx.post(f"{self.control_url}/restore", timeout=self.timeout_s)
        except httpx.HTTPError as e:
            return time.monotonic() - start, [f"VM restore: the runner did not answer: {e}"]
        finally:
            self._restoring.clear()
        self.desktop.fresh_connections()  # the restored guest knows no connection made since
        if r.status_code != 200:
            detail = r.json().get("detail", r.text) if r.content else r.reason_phrase
            return time.monotonic() - start, [f"VM restore failed, VM rebuilt: {detail}"]
        return time.monotonic() - start, []

    def recovered(self) -> bool:
        """No restore in flight and the runner's VM is ready: its first snapshot taken, or rebuilt
        from the base after a failed restore. The caller then takes a new baseline of it."""
        return not self._restoring.is_set() and self.runner_ready() is None
