"""Desktop VM benchmark (kubecua_episode.vm): prints JSON with
- cold boot to ready (a fresh overlay, qemu, the desktop server answering /platform and a
  screenshot) p50/p90 over --boots VMs, one after another; anchor: KubeVirt VMI start 15-20 s p50
- snapshot (savevm) seconds, and restore (loadvm + the same readiness check) p50/p99 over
  --restores, against the container reset (the episode server's release on a local sandbox of the
  same desktop, as bench_sandbox.py measures it) in the same run
- memory of one idle ready VM: qemu's proportional set size (PSS) and the guest memory size, and
  how many such VMs fit in this machine's memory
- the accelerator used (kvm, or tcg where the host's KVM cannot run a stock kernel)

    sandbox-image/episode-server/.venv/bin/python sandbox-image/bench/bench_vm.py [--boots 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_sandbox import TASK, _ready, free_port

from kubecua_episode.vm.runner import VmRunner, VmSpec
from kubecua_sandbox_client import ObservationOptions, SandboxClient


def pcts(xs: list[float], *qs: int) -> dict[str, float]:
    xs = sorted(xs)
    out = {f"p{q}": round(xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))], 3) for q in qs}
    return out | {"p50": round(statistics.median(xs), 3), "n": len(xs)}


def pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss for {pid}")


def mem_total_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemTotal")


def vm_numbers(disk_dir: Path, boots: int, restores: int) -> dict[str, object]:
    token = os.urandom(8).hex()
    spec = VmSpec.from_built_disk(disk_dir, token=token)
    out: dict[str, object] = {"accel": spec.accel, "guest_memory_mib": spec.memory_mb}
    boot_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kubecua-bench-vm-") as work:
        for i in range(boots):
            runner = VmRunner(spec, Path(work) / f"vm{i}")
            try:
                boot_s.append(runner.boot())
                if i < boots - 1:
                    continue
                # The last VM: idle memory, then snapshot and restores.
                assert runner.proc is not None
                pss = pss_mib(runner.proc.pid)
                out["idle_vm_pss_mib"] = round(pss)
                out["snapshot_seconds"] = round(runner.snapshot(), 3)
                restore_s = [runner.restore() for _ in range(restores)]
                out["restore_to_ready_seconds"] = pcts(restore_s, 99)
                out["overlay_mib_after_snapshot"] = round(runner.overlay.stat().st_size / 2**20)
                fit = int(mem_total_mib() * 0.9 // max(pss, spec.memory_mb))
                out["vms_that_fit_in_90pct_of_memory_at_guest_size"] = fit
                out["vms_that_fit_in_90pct_of_memory_at_idle_pss"] = int(
                    mem_total_mib() * 0.9 // pss
                )
            finally:
                runner.stop()
    out["cold_boot_to_ready_seconds"] = pcts(boot_s, 90)
    out["anchor_kubevirt_vmi_start_p50_seconds"] = "15-20"
    return out


async def _container_resets(url: str, token: str, n: int) -> list[float]:
    out = []
    async with SandboxClient(url, token, timeout=180) as sb:
        for _ in range(n):
            ep = await sb.start_episode(TASK, ObservationOptions(format="png"))
            out.append((await sb.release(ep.episode_id)).reset_seconds)
    return out


def container_reset(n: int) -> dict[str, object]:
    """The local sandbox's reset (the container's reset path) of the same desktop."""
    work = Path(tempfile.mkdtemp(prefix="kubecua-bench-"))
    token = os.urandom(8).hex()
    (work / "token").write_text(token)
    port = free_port()
    cmd = [sys.executable, "-m", "kubecua_episode.local", "--display",
           str(300 + os.getpid() % 300), "--episode-port", str(port), "--desktop-port",
           str(free_port()), "--cdp-port", str(free_port()), "--vlc-port", str(free_port()),
           "--token-file", str(work / "token"), "--workdir", str(work)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while not _ready(url):
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("bench-vm: the local sandbox did not become ready")
            time.sleep(0.2)
        return {"container_reset_seconds": pcts(asyncio.run(_container_resets(url, token, n)), 99)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--disk-dir", type=Path, required=True, help="hack/build-vm-disk.sh's output")
    p.add_argument("--boots", type=int, default=3)
    p.add_argument("--restores", type=int, default=20)
    a = p.parse_args()
    if a.boots < 1 or a.restores < 1:
        sys.exit("bench-vm: --boots and --restores must be at least 1")
    result = vm_numbers(a.disk_dir, a.boots, a.restores)
    result.update(container_reset(a.restores))  # after the VMs are gone: they do not compete
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
