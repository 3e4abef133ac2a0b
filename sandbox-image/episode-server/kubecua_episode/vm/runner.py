"""Boots a desktop disk with qemu on a copy-on-write overlay and resets it from a snapshot.

    runner = VmRunner(VmSpec.from_built_disk(Path("~/.cache/kubecua/vm/<hash>")), Path("/tmp/vm0"))
    runner.boot()            # overlay on the read-only base, config drive, qemu, wait until ready
    runner.snapshot()        # savevm: memory, devices and disk in the overlay, named "clean"
    ...                      # an episode drives http://127.0.0.1:<runner.port> (the desktop server)
    runner.restore()         # loadvm "clean", then verify; a failure quarantines and rebuilds

One base serves any number of VMs: each has its own overlay (`qemu-img create -b base`), which
also holds its snapshot. The token and per-VM settings reach the guest on a read-only config drive
(an ext4 image labelled cidata, made with mkfs.ext4 -d: no loop mount), never in the disk; a
read-only drive is also left out of savevm, which requires every writable disk to be qcow2.

Readiness is the desktop server answering /platform with the token and returning a screenshot,
the same check the kubevirt backend's probe and the episode server's /readyz make.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from kubecua_episode.vm.qmp import Qmp, QmpError

log = logging.getLogger(__name__)

SNAPSHOT = "clean"
# Our disk's kernel command line: the root is the first virtio disk, the init our own.
OUR_APPEND = "root=/dev/vda rw console=ttyS0 init=/opt/kubecua/vm/init quiet"


class VmError(RuntimeError):
    pass


def default_accel() -> str:
    """kvm where the host's KVM can run a stock kernel, else tcg (qemu's emulator).

    KUBECUA_VM_ACCEL overrides. A host whose KVM is kvm_pvm (nested virtualisation on a
    Firecracker host, as on kubecua's CI machines) runs only PVM-enabled guest kernels: a stock
    Debian kernel hangs in its decompressor there, so tcg is the only way to boot it."""
    forced = os.environ.get("KUBECUA_VM_ACCEL", "").strip()
    if forced:
        if forced not in {"kvm", "tcg"}:
            raise VmError(f"KUBECUA_VM_ACCEL={forced!r}: expected kvm or tcg")
        return forced
    if Path("/sys/module/kvm_pvm").exists() or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    return "kvm"


@dataclass(frozen=True)
class VmSpec:
    """What to boot. `kernel`/`initrd` set: direct kernel boot (our disk). Unset: the disk boots
    itself through its own bootloader (OSWorld's stock Ubuntu.qcow2, docs/vm-desktops.md)."""

    disk: Path
    kernel: Path | None = None
    initrd: Path | None = None
    append: str = OUR_APPEND
    memory_mb: int = 2048
    cpus: int = 2
    accel: str = field(default_factory=default_accel)
    token: str = ""
    screen: str = "1920x1080"
    guest_port: int = 5000
    # Also forwarded, to free host ports (VmRunner.forwards): Chrome's CDP and VLC's HTTP
    # interface, which OSWorld's setup steps and evaluators reach directly.
    extra_guest_ports: tuple[int, ...] = (9222, 8080)
    boot_timeout_s: float = 900.0

    @classmethod
    def from_built_disk(cls, directory: Path, **kw: object) -> VmSpec:
        """hack/build-vm-disk.sh's output directory: disk.qcow2, vmlinuz, initrd.img."""
        for name in ("disk.qcow2", "vmlinuz", "initrd.img"):
            if not (directory / name).is_file():
                raise VmError(f"{directory / name} is missing: run hack/build-vm-disk.sh")
        return cls(
            disk=directory / "disk.qcow2",
            kernel=directory / "vmlinuz",
            initrd=directory / "initrd.img",
            **kw,  # type: ignore[arg-type]
        )

    def validate(self) -> None:
        if not self.disk.is_file():
            raise VmError(f"disk: {self.disk} does not exist")
        if (self.kernel is None) != (self.initrd is None):
            raise VmError("kernel and initrd: give both (direct kernel boot) or neither")
        if self.memory_mb < 512:
            raise VmError(f"memory_mb: {self.memory_mb} is below 512")
        if self.accel not in {"kvm", "tcg"}:
            raise VmError(f"accel: {self.accel!r}, expected kvm or tcg")
        if "\n" in self.token or "\n" in self.screen:
            raise VmError("token and screen must be single lines")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VmRunner:
    """One VM. States: stopped, booting, ready, quarantined (a failed restore; being rebuilt)."""

    def __init__(
        self,
        spec: VmSpec,
        workdir: Path,
        port: int | None = None,
        forwards: dict[int, int] | None = None,
    ) -> None:
        """`forwards`: host ports of extra guest ports (a pod fixes them where its episode server
        expects CDP and VLC); the others get free ports."""
        spec.validate()
        self.spec, self.workdir = spec, workdir
        self.port = port or free_port()
        fixed = forwards or {}
        self.forwards = {guest: fixed.get(guest) or free_port() for guest in spec.extra_guest_ports}
        self.state = "stopped"
        self.proc: subprocess.Popen[bytes] | None = None
        self.qmp: Qmp | None = None
        self.rebuilds = 0
        self.snapshotted = False  # the running VM has its snapshot: restores can start
        self.restores = 0  # successful ones

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def overlay(self) -> Path:
        return self.workdir / "overlay.qcow2"

    # -- lifecycle -----------------------------------------------------------------------------

    def boot(self) -> float:
        """A fresh overlay on the base, qemu, and the wait for readiness; returns the seconds."""
        start = time.monotonic()
        self.state, self.snapshotted = "booting", False
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.overlay.unlink(missing_ok=True)
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
             str(self.spec.disk.resolve()), str(self.overlay)],
            check=True, capture_output=True,
        )  # fmt: skip
        seed = self._config_drive()
        log_path = self.workdir / "console.log"
        with log_path.open("wb") as console:
            self.proc = subprocess.Popen(
                self._qemu_argv(seed), stdin=subprocess.DEVNULL, stdout=console, stderr=console
            )
        self.qmp = Qmp(self.workdir / "qmp.sock")
        try:
            self.qmp.connect()
            self.wait_ready(self.spec.boot_timeout_s)
        except (QmpError, VmError) as exc:
            tail = log_path.read_bytes()[-2000:].decode(errors="replace")
            self.stop()
            raise VmError(f"VM did not become ready: {exc}\nconsole tail:\n{tail}") from exc
        self.state = "ready"
        return time.monotonic() - start

    def snapshot(self, name: str = SNAPSHOT) -> float:
        """savevm: the running desktop's memory, devices and disk, stored in the overlay."""
        start = time.monotonic()
        self._monitor().hmp(f"savevm {name}", timeout_s=600)
        self.snapshotted = True
        return time.monotonic() - start

    def restore(self, name: str = SNAPSHOT, verify_timeout_s: float = 60.0) -> float:
        """loadvm and verify. Either failing quarantines the VM (state "quarantined"), then it is
        rebuilt from its base (boot + snapshot) and VmError says what failed."""
        start = time.monotonic()
        try:
            self._monitor().hmp(f"loadvm {name}", timeout_s=120)
            self.wait_ready(verify_timeout_s)
        except (QmpError, VmError, OSError) as exc:
            self.quarantine(f"restore of {name!r} failed: {exc}")
            raise VmError(f"restore failed, VM rebuilt from its base: {exc}") from exc
        self.state = "ready"
        self.restores += 1
        return time.monotonic() - start

    def quarantine(self, reason: str) -> None:
        log.warning("VM %s quarantined: %s; rebuilding from its base", self.workdir, reason)
        self.state = "quarantined"
        self.stop()
        self.state = "quarantined"
        self.rebuilds += 1
        self.boot()
        self.snapshot()

    def stop(self) -> None:
        if self.qmp is not None:
            self.qmp.close()
            self.qmp = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # qemu exits at once on SIGTERM
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.state = "stopped"

    def __enter__(self) -> VmRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- readiness -----------------------------------------------------------------------------

    def probe(self) -> bool:
        """One readiness check. A new connection each time: a kept-alive one would belong to the
        guest's network state before a loadvm."""
        headers = {"Authorization": f"Bearer {self.spec.token}"} if self.spec.token else {}
        try:
            with httpx.Client(base_url=self.url, headers=headers, timeout=5.0) as client:
                platform = client.get("/platform")
                if platform.status_code != 200 or not platform.text.strip():
                    return False
                shot = client.get("/screenshot")
                return shot.status_code == 200 and shot.content[:8] == b"\x89PNG\r\n\x1a\n"
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while not self.probe():
            if self.proc is None or self.proc.poll() is not None:
                raise VmError("qemu exited")
            if time.monotonic() > deadline:
                raise VmError(f"desktop server not ready on {self.url} after {timeout_s:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- parts ---------------------------------------------------------------------------------

    def _monitor(self) -> Qmp:
        if self.qmp is None or self.state not in {"ready", "booting"}:
            raise VmError(f"VM is {self.state}")
        return self.qmp

    def _config_drive(self) -> Path:
        """The per-VM settings as a read-only ext4 image labelled cidata (init.sh reads
        user-data). Only readable by this user: it holds the token."""
        src = self.workdir / "seed"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(mode=0o700)
        lines = [f"KUBECUA_SCREEN={self.spec.screen}", f"KUBECUA_HOSTNAME={self.workdir.name}"]
        if self.spec.token:
            lines.append(f"KUBECUA_SANDBOX_TOKEN={self.spec.token}")
        (src / "user-data").write_text("\n".join(lines) + "\n")
        (src / "meta-data").write_text(f"instance-id: {self.workdir.name}\n")
        image = self.workdir / "seed.img"
        image.unlink(missing_ok=True)
        fd = os.open(image, os.O_CREAT | os.O_WRONLY, 0o600)  # mkfs keeps the mode
        os.close(fd)
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-L", "cidata", "-d", str(src), str(image), "4M"],
            check=True, capture_output=True,
        )  # fmt: skip
        shutil.rmtree(src)
        return image

    def _qemu_argv(self, seed: Path) -> list[str]:
        s = self.spec
        if s.accel == "kvm":
            # arch-capabilities: some hosts' KVM refuses the MSR that -cpu host would pass on.
            accel = ["-accel", "kvm", "-cpu", "host,-arch-capabilities"]
        else:
            accel = ["-accel", "tcg,thread=multi,tb-size=512", "-cpu", "max"]
        argv = [
            "qemu-system-x86_64", "-machine", "q35", *accel,
            "-smp", str(s.cpus), "-m", str(s.memory_mb),
            "-display", "none", "-vga", "std", "-no-user-config", "-nodefaults",
            "-serial", "stdio", "-monitor", "none",
            "-qmp", f"unix:{self.workdir / 'qmp.sock'},server=on,wait=off",
            "-drive", f"file={self.overlay},if=virtio,format=qcow2,discard=unmap",
            "-drive", f"file={seed},if=virtio,format=raw,readonly=on",
            "-netdev", "user,id=net0" + "".join(
                f",hostfwd=tcp:127.0.0.1:{host}-:{guest}"
                for guest, host in {s.guest_port: self.port, **self.forwards}.items()),
            "-device", "virtio-net-pci,netdev=net0",
        ]  # fmt: skip
        if s.kernel is not None and s.initrd is not None:
            argv += ["-kernel", str(s.kernel), "-initrd", str(s.initrd), "-append", s.append]
        return argv
