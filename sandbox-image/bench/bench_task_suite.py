"""The offline task suite (sandbox-image/tasks) on the container desktop and on the desktop VM:
each task's reference solution and its no-op, one episode each, on one sandbox of each kind.
Prints JSON: per task the two scores and the wall time of each episode (start to released) on
both, and the tasks whose scores differ between the two.

    sandbox-image/episode-server/.venv/bin/python sandbox-image/bench/bench_task_suite.py \
        --disk-dir $(hack/build-vm-disk.sh) [--tasks files/count-lines system/sound-volume-80]

The container desktop is the local sandbox (kubecua-sandbox-local: the image's desktop session
and episode server, on this host); the VM is our VM disk under kubecua_episode.vm with the
episode server beside it in --remote mode, as a VM pool's pod runs them (each release restores the
VM's snapshot). Under qemu's emulator (TCG, docs/vm-desktops.md) GUI apps start slowly: pass a
subset with --tasks."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_sandbox import _ready, free_port

from kubecua_episode.vm.__main__ import serve
from kubecua_episode.vm.runner import VmRunner, VmSpec
from kubecua_sandbox_client import ObservationOptions, SandboxClient, SettleOptions

TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"
OBS = ObservationOptions(format="jpeg", max_pixels=320 * 180)
SETTLE = SettleOptions(min_seconds=0.2, max_seconds=4.0, stable_frames=2)


def task_paths(names: list[str]) -> list[Path]:
    if names:
        return [TASKS_DIR / f"{n}.json" for n in names]
    found = TASKS_DIR.glob("*/*.json")  # a task is a JSON file with a .solutions.json beside it
    return sorted(p for p in found if p.with_suffix(".solutions.json").exists())


def wait_ready(url: str, proc: subprocess.Popen[bytes], limit: float) -> None:
    deadline = time.monotonic() + limit
    while not _ready(url):
        if time.monotonic() > deadline or proc.poll() is not None:
            sys.exit(f"bench-task-suite: {url} did not become ready")
        time.sleep(0.5)


@contextmanager
def local_sandbox(token: str) -> Iterator[str]:
    work = Path(tempfile.mkdtemp(prefix="kubecua-bench-suite-"))
    (work / "token").write_text(token)
    port = free_port()
    cmd = [sys.executable, "-m", "kubecua_episode.local", "--display",
           str(300 + os.getpid() % 300), "--episode-port", str(port), "--desktop-port",
           str(free_port()), "--cdp-port", str(free_port()), "--vlc-port", str(free_port()),
           "--token-file", str(work / "token"), "--workdir", str(work),
           "--idle-timeout", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 180)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


@contextmanager
def vm_sandbox(disk_dir: Path, token: str) -> Iterator[str]:
    work = Path(tempfile.mkdtemp(prefix="kubecua-bench-suite-vm-"))
    runner = VmRunner(VmSpec.from_built_disk(disk_dir, token=token), work / "vm")
    runner.boot()
    runner.snapshot()
    control_port, port = free_port(), free_port()
    control = serve(runner, control_port)
    env = {**os.environ, "KUBECUA_SANDBOX_TOKEN": token, "KUBECUA_DESKTOP_URL": runner.url,
           "KUBECUA_CDP_URL": f"http://127.0.0.1:{runner.forwards[9222]}",
           "KUBECUA_VLC_URL": f"http://127.0.0.1:{runner.forwards[8080]}",
           "KUBECUA_VM_CONTROL_URL": f"http://127.0.0.1:{control_port}",
           "KUBECUA_IDLE_TIMEOUT_SECONDS": "0"}  # fmt: skip
    log = (work / "episode.log").open("wb")
    cmd = [sys.executable, "-m", "kubecua_episode", "--remote", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 600)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        control.shutdown()
        control.server_close()
        runner.stop()


async def episode(sb: SandboxClient, task: dict[str, Any], actions: list[dict[str, Any]]) -> Any:
    t0 = time.monotonic()
    ep = await sb.start_episode(task, OBS, SETTLE)
    try:
        for a in actions:
            await sb.step(ep.episode_id, a["action"], a["action_space"])
        score = (await sb.evaluate(ep.episode_id)).score
    finally:
        clean = (await sb.release(ep.episode_id)).clean
    return {"score": score, "seconds": round(time.monotonic() - t0, 1), "clean": clean}


async def run_suite(url: str, token: str, paths: list[Path]) -> dict[str, Any]:
    out = {}
    async with SandboxClient(url, token, timeout=600) as sb:
        for path in paths:
            task = json.loads(path.read_text())
            sols = json.loads(path.with_suffix(".solutions.json").read_text())
            name = f"{path.parent.name}/{path.stem}"
            try:
                out[name] = {"reference": await episode(sb, task, sols["reference"]),
                             "noop": await episode(sb, task, [])}  # fmt: skip
            except Exception as e:  # one task's failure is a result, not the end of the run
                out[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
            print(name, out[name], file=sys.stderr, flush=True)
    return out


def scores(result: dict[str, Any]) -> tuple[Any, Any]:
    if "error" in result:
        return ("error", "error")
    return (result["reference"]["score"], result["noop"]["score"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--disk-dir", type=Path, help="hack/build-vm-disk.sh's output (else no VM)")
    p.add_argument("--tasks", nargs="*", default=[], help="DIR/ID of tasks (default: all)")
    p.add_argument("--skip-container", action="store_true")
    a = p.parse_args()
    paths = task_paths(a.tasks)
    token = os.urandom(8).hex()
    result: dict[str, Any] = {"tasks": [f"{q.parent.name}/{q.stem}" for q in paths]}
    if not a.skip_container:
        with local_sandbox(token) as url:
            result["container"] = asyncio.run(run_suite(url, token, paths))
    if a.disk_dir:
        t0 = time.monotonic()
        with vm_sandbox(a.disk_dir, token) as url:
            result["vm_boot_seconds"] = round(time.monotonic() - t0, 1)
            result["vm"] = asyncio.run(run_suite(url, token, paths))
    if "container" in result and "vm" in result:
        both = result["container"], result["vm"]
        result["differ"] = [t for t in result["tasks"] if scores(both[0][t]) != scores(both[1][t])]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
