"""Desktop VMs (kubecua_episode.vm): our desktop disk (hack/build-vm-disk.sh) booted with qemu on a
copy-on-write overlay, snapshotted once ready, and restored from that snapshot.

One VM for the module (a boot under qemu's emulator takes minutes here: this machine's KVM is
kvm_pvm, which runs no stock kernel; docs/vm-desktops.md), plus one rebuild in the last test.
Every check reads state through the guest's desktop server, the way an episode does."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from window_kit import WINDOWS, DesktopReader
from window_kit import entry as window_entry

from kubecua_episode.vm.__main__ import serve
from kubecua_episode.vm.runner import VmError, VmRunner, VmSpec, free_port
from kubecua_sandbox_client import ObservationOptions, SandboxClient, SettleOptions

pytestmark = pytest.mark.vm
TOKEN = "vm-token-" + os.urandom(4).hex()
KEY = ["org.gnome.desktop.interface", "color-scheme"]
PROBE = "/home/user/Desktop/episode-left-this.txt"


def disk_dir() -> Path:
    """KUBECUA_VM_DISK_DIR, else the one disk hack/build-vm-disk.sh keeps in the cache."""
    if os.environ.get("KUBECUA_VM_DISK_DIR"):
        return Path(os.environ["KUBECUA_VM_DISK_DIR"])
    cache = Path(os.environ.get("KUBECUA_CACHE", Path.home() / ".cache/kubecua")) / "vm"
    built = sorted(p for p in cache.glob("*/disk.qcow2"))
    if not built:
        pytest.skip("no VM disk: run hack/build-vm-disk.sh (make vm-disk)")
    return built[-1].parent


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VmRunner]:
    for tool in ("qemu-system-x86_64", "qemu-img", "mkfs.ext4"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: run `make setup-apt` (hack/apt/vm.txt)")
    spec = VmSpec.from_built_disk(disk_dir(), token=TOKEN)
    runner = VmRunner(spec, tmp_path_factory.mktemp("vm0"))
    runner.boot()
    runner.snapshot()
    yield runner
    runner.stop()


def desktop(vm: VmRunner) -> httpx.Client:
    return httpx.Client(base_url=vm.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60.0)


def sh(vm: VmRunner, script: str) -> tuple[int, str]:
    with desktop(vm) as http:
        r = http.post("/execute", json={"command": script, "shell": True})
    r.raise_for_status()
    body = r.json()
    return int(body["returncode"]), str(body.get("output", ""))


def wait_for(condition: object, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not true after {limit} s")
        time.sleep(0.5)


def test_vm_boots_on_an_overlay_and_serves_only_the_config_drives_token(vm: VmRunner) -> None:
    assert vm.state == "ready"
    with desktop(vm) as http:
        assert http.get("/platform").text == "Linux"
    assert httpx.get(vm.url + "/platform", timeout=30).status_code == 401
    wrong = httpx.get(vm.url + "/platform", headers={"Authorization": "Bearer no"}, timeout=30)
    assert wrong.status_code == 401
    # The VM writes to its overlay only; the shared base is the one the builder made.
    info = subprocess.run(
        ["qemu-img", "info", "-U", "--output=json", str(vm.overlay)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert f'"backing-filename": "{vm.spec.disk.resolve()}"' in info
    assert oct(vm.spec.disk.stat().st_mode & 0o222) == "0o0"
    # The token came from the config drive into memory (/run is a tmpfs), not onto the disk.
    assert sh(vm, "stat -f -c %T /run/kubecua/token")[1].strip() == "tmpfs"
    assert sh(vm, "cat /run/kubecua/token")[1] == TOKEN
    code, out = sh(vm, f"grep -rl {TOKEN} /etc /home /opt/kubecua/vm 2>/dev/null; true")
    assert code == 0
    assert out.strip() == ""


def test_restore_undoes_settings_files_and_running_apps(vm: VmRunner) -> None:
    assert sh(vm, f"gsettings get {' '.join(KEY)}")[1].strip() == "'default'"
    assert sh(vm, f"gsettings set {' '.join(KEY)} prefer-dark")[0] == 0
    assert sh(vm, f"echo dirty > {PROBE}")[0] == 0
    with desktop(vm) as http:
        http.post("/setup/launch", json={"command": ["gedit"]}).raise_for_status()
    wait_for(lambda: "gedit" in sh(vm, "wmctrl -lx")[1].lower(), 180, "a gedit window")
    # The episode's state is really there before the restore.
    assert sh(vm, f"gsettings get {' '.join(KEY)}")[1].strip() == "'prefer-dark'"
    assert sh(vm, f"cat {PROBE}")[1].strip() == "dirty"

    seconds = vm.restore()

    assert vm.state == "ready"
    assert seconds < 120
    assert sh(vm, f"gsettings get {' '.join(KEY)}")[1].strip() == "'default'"
    assert sh(vm, f"test -e {PROBE}; echo $?")[1].strip() == "1"
    assert sh(vm, "pgrep -x gedit; echo $?")[1].strip().splitlines()[-1] == "1"
    assert "gedit" not in sh(vm, "wmctrl -lx")[1].lower()


# Apps whose windows the VM test opens unless KUBECUA_VM_WINDOW_APPS names others ("all": every
# [[window]] app): one of each kind (maximised, centred) by default, to keep make test-vm short.
# Under qemu's emulator here all nine passed in 557 s with the boot (GIMP alone 193 s), 2026-11-29.
VM_WINDOW_APPS = "chrome libreoffice-calc vlc gedit gnome-terminal"


@pytest.mark.parametrize("app", [e["app"] for e in WINDOWS])
def test_each_app_opens_where_osworlds_vm_opens_it_on_the_vm(
    vm: VmRunner, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started as a task's `launch` step starts it, read back through the guest's desktop
    server; the snapshot restore after each app is the VM's reset, so each opens after one."""
    wanted = os.environ.get("KUBECUA_VM_WINDOW_APPS", VM_WINDOW_APPS).split()
    if "all" not in wanted and app not in wanted:
        pytest.skip(
            f"{app} is not in KUBECUA_VM_WINDOW_APPS ({' '.join(wanted)}): the VM test opens one "
            "app of each kind by default, as all nine take about 9 minutes under qemu's emulator "
            "here; test_image.py opens every app with the same session code in the container, "
            "and KUBECUA_VM_WINDOW_APPS=all runs them all here"
        )
    reader = DesktopReader(vm.url, TOKEN)
    try:
        launched = reader.http.post("/setup/launch", json={"command": window_entry(app)["launch"]})
        launched.raise_for_status()
        path = reader.check(app, "vm", limit=900)
    finally:
        reader.close()
        vm.restore()
    with capsys.disabled():
        print(f"\n{app}'s first frame on the VM: {path}")


# The offline suite's settings task (as in test_reset_fidelity.py): its reference sets the dark
# style. A remote episode server's own clean-up cannot undo dconf; the VM's restore does.
TASK = {
    "id": "vm-dark-style",
    "instruction": "Switch the desktop to the dark style.",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": f"gsettings get {' '.join(KEY)}",
                   "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "'prefer-dark'\n"}},
    },
}  # fmt: skip
REFERENCE = [f"import subprocess; subprocess.run({['gsettings', 'set', *KEY, 'prefer-dark']!r})"]


def test_episode_server_scores_a_task_on_the_vm_and_its_release_restores_the_snapshot(
    vm: VmRunner, tmp_path: Path
) -> None:
    """As a VM sandbox's pod runs them: the runner's control port beside the episode server,
    whose release restores the VM's snapshot through it (no clean-up in place)."""
    port, control_port = free_port(), free_port()
    control = serve(vm, control_port)
    restores = vm.restores
    env = {
        **os.environ,
        "KUBECUA_SANDBOX_TOKEN": TOKEN,
        "KUBECUA_DESKTOP_URL": vm.url,
        "KUBECUA_CDP_URL": f"http://127.0.0.1:{vm.forwards[9222]}",
        "KUBECUA_VLC_URL": f"http://127.0.0.1:{vm.forwards[8080]}",
        "KUBECUA_VM_CONTROL_URL": f"http://127.0.0.1:{control_port}",
    }
    log = (tmp_path / "episode.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "kubecua_episode", "--remote", "--port", str(port)],
        env=env, stdout=log, stderr=log,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert server.poll() is None, (tmp_path / "episode.log").read_text()[-3000:]
        try:
            return httpx.get(url + "/readyz", timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    async def episode(sb: SandboxClient, actions: list[str]) -> float:
        wait_for(ready, 120, "the episode server's /readyz")
        ep = await sb.start_episode(TASK, ObservationOptions(format="png"), SettleOptions())
        try:
            for action in [*actions, "DONE"]:
                await sb.step(ep.episode_id, action)
            return (await sb.evaluate(ep.episode_id)).score
        finally:
            released = await sb.release(ep.episode_id)  # the runner's loadvm, then verify
            assert released.clean

    async def run() -> list[float]:
        async with SandboxClient(url, TOKEN, timeout=600) as sb:
            return [await episode(sb, REFERENCE), await episode(sb, []),
                    await episode(sb, REFERENCE)]  # fmt: skip

    try:
        wait_for(ready, 300, "the episode server's /readyz")
        # 0 after 1: the reference's dconf change is gone, which only the restore undoes.
        assert asyncio.run(run()) == [1.0, 0.0, 1.0]
        assert vm.restores == restores + 3
        assert vm.rebuilds == 0
    finally:
        server.terminate()
        server.wait(30)
        control.shutdown()
        control.server_close()
        log.close()


def test_a_lost_snapshot_quarantines_the_vm_and_rebuilds_it_from_its_base(vm: VmRunner) -> None:
    assert sh(vm, f"echo dirty > {PROBE}")[0] == 0
    assert vm.qmp is not None
    vm.qmp.hmp("delvm clean")  # the overlay's snapshot is gone, as if the overlay were corrupt

    with pytest.raises(VmError, match="restore failed, VM rebuilt from its base"):
        vm.restore()

    assert vm.rebuilds == 1
    assert vm.state == "ready"
    assert sh(vm, f"test -e {PROBE}; echo $?")[1].strip() == "1"  # a fresh overlay
    vm.restore()  # the rebuilt VM has its snapshot again
    assert vm.state == "ready"
