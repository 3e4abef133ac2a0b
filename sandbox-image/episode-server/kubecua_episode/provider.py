"""A desktop-env provider that attaches to a desktop that is already running, by address.

desktop-env's providers start and snapshot VMs (VMware, VirtualBox, Docker, clouds); a kubecua
sandbox's desktop is started by its pod or VM, so "starting the emulator" is attaching to its
address, and "reverting to the snapshot" is the sandbox's own reset (the episode server's
release) when one is given. With it, desktop-env's own `DesktopEnv` runs OSWorld tasks
unchanged against a kubecua desktop:

    env = attach_desktop_env(DesktopAddress("10.0.0.7"), action_space="pyautogui")
    obs = env.reset(task_config=task); env.step("pyautogui.click(10, 10)"); env.evaluate()

The address string is desktop-env's Docker-provider convention, `host:server:chromium:vnc:vlc`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from desktop_env.providers.base import Provider, VMManager

from kubecua_episode import evaluators

if TYPE_CHECKING:
    from desktop_env.desktop_env import DesktopEnv

_FACTORY_LOCK = threading.Lock()


@dataclass(frozen=True)
class DesktopAddress:
    host: str
    server_port: int = 5000
    chromium_port: int = 9222
    vnc_port: int = 8006  # unused by kubecua desktops; desktop-env only stores it
    vlc_port: int = 8080

    def __str__(self) -> str:
        return (
            f"{self.host}:{self.server_port}:{self.chromium_port}:{self.vnc_port}:{self.vlc_port}"
        )


class AttachProvider(Provider):
    def __init__(self, address: DesktopAddress, reset: Callable[[], None] | None = None) -> None:
        super().__init__(region=None)
        self.address, self.reset = address, reset

    def start_emulator(self, path_to_vm: str, headless: bool, *args: Any) -> None:
        """The desktop already runs; nothing to start."""

    def get_ip_address(self, path_to_vm: str) -> str:
        return str(self.address)

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        raise NotImplementedError("an attached desktop has no snapshots; its reset restores it")

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        if self.reset is None:
            raise NotImplementedError("no reset given: attach_desktop_env(..., reset=...)")
        self.reset()
        return path_to_vm

    def stop_emulator(self, path_to_vm: str, *args: Any) -> None:
        """The desktop belongs to its pod or VM; detaching leaves it running."""


class AttachManager(VMManager):
    """One known desktop: no registry to keep."""

    def __init__(self, address: DesktopAddress) -> None:
        self.address = address

    def initialize_registry(self, **kwargs: Any) -> None:
        pass

    def add_vm(self, vm_path: str, **kwargs: Any) -> None:
        pass

    def delete_vm(self, vm_path: str, **kwargs: Any) -> None:
        pass

    def occupy_vm(self, vm_path: str, pid: int, **kwargs: Any) -> None:
        pass

    def list_free_vms(self, **kwargs: Any) -> list[str]:
        return [str(self.address)]

    def check_and_clean(self, **kwargs: Any) -> None:
        pass

    def get_vm_path(self, **kwargs: Any) -> str:
        return str(self.address)


def _desktop_env_module() -> Any:
    """desktop_env.desktop_env, imported after the metric package (its `from
    desktop_env.evaluators import metrics` needs the easyocr stand-in; see evaluators)."""
    evaluators.load()
    import desktop_env.desktop_env as module

    return module


@contextlib.contextmanager
def _our_factory(manager: AttachManager, provider: AttachProvider) -> Iterator[None]:
    # desktop-env 1.0.2 picks providers from a fixed if-chain inside DesktopEnv.__init__ and has
    # no registration hook; ours stands in for that one call (under a lock: module state).
    module = _desktop_env_module()
    with _FACTORY_LOCK:
        original = module.create_vm_manager_and_provider
        module.create_vm_manager_and_provider = lambda *a, **k: (manager, provider)
        try:
            yield
        finally:
            module.create_vm_manager_and_provider = original


def attach_desktop_env(
    address: DesktopAddress, reset: Callable[[], None] | None = None, **kwargs: Any
) -> DesktopEnv:
    """desktop-env's own DesktopEnv on a running desktop. `reset` runs when DesktopEnv wants its
    snapshot back (reset() after a used episode). provider_name "docker" is desktop-env's name
    for a desktop that starts clean and is reached by host and ports, which is what this is."""
    provider = AttachProvider(address, reset)
    with _our_factory(AttachManager(address), provider):
        env: DesktopEnv = _desktop_env_module().DesktopEnv(
            provider_name="docker", path_to_vm=str(address), **kwargs
        )
    return env
