"""Sandbox benchmark: starts one local sandbox (kubecua-sandbox-local) and prints JSON with
- step overhead p50/p95 at 1920x1080: action to observation, settle excluded (settle capped at 0),
  and its two parts as the server reports them (the action; the one screenshot)
- step latency incl. adaptive settle for a click and for typing into the text editor
- screenshot capture + PNG encode on the desktop (/screenshot) and our JPEG re-encode
- reset (release) p50/p95
- the OSWorld-style anchor from the same run: a fresh python per pyautogui action, pyautogui-style
  screenshot (PIL ImageGrab) + default PNG, fixed 2 s pause

    sandbox-image/episode-server/.venv/bin/python sandbox-image/bench/bench_sandbox.py [--n 30]

- container cold start: `podman run` of the sandbox image to /readyz 200, when the image is
  built (hack/build-images.sh sandbox); skipped with a note otherwise

Leaves out: VM backends (KubeVirt), whose reset is a VMI restart measured elsewhere."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from kubecua_sandbox_client import ObservationOptions, SandboxClient, SettleOptions

CHECK = {"type": "vm_command_line", "command": "true", "shell": True}
TASK = {
    "id": "bench",
    "instruction": "bench",
    "config": [],
    "evaluator": {"func": "exact_match", "result": CHECK,
                  "expected": {"type": "rule", "rules": {"expected": ""}}},
}  # fmt: skip
WAIT_EDITOR = "for i in $(seq 600); do wmctrl -l | grep -q b.txt && exit 0; sleep 0.1; done"
EDITOR_TASK = {**TASK, "config": [
    {"type": "execute", "parameters": {"command": "touch /home/user/b.txt", "shell": True}},
    {"type": "launch", "parameters": {"command": ["gedit", "/home/user/b.txt"]}},
    {"type": "execute", "parameters": {"shell": True, "command": WAIT_EDITOR}}]}  # fmt: skip
IMAGE = "localhost/kubecua/sandbox:dev"
PODMAN = ["podman", "--runtime", "runc"]  # crun refuses this host's cgroup layout
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
# pyautogui.screenshot() is PIL's ImageGrab on X11 (pyscreeze also insists on gnome-screenshot,
# which Debian's sandbox does not ship), so the anchor calls ImageGrab directly.
ANCHOR = """import io, time
from PIL import ImageGrab
t = time.monotonic(); img = ImageGrab.grab(); buf = io.BytesIO(); img.save(buf, "PNG")
print(time.monotonic() - t)"""


def pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": round(statistics.median(xs), 4), "p95": round(xs[int(0.95 * (len(xs) - 1))], 4)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(url: str, token: str, n: int) -> dict[str, object]:
    out: dict[str, object] = {}
    full = ObservationOptions(format="png")
    async with SandboxClient(url, token, timeout=180) as sb:
        ep = await sb.start_episode(TASK, full, SettleOptions(min_seconds=0, max_seconds=0))
        over, action, observe = [], [], []
        for i in range(n):
            t = time.monotonic()
            r = await sb.step(ep.episode_id, f"pyautogui.moveTo({100 + i}, 100)")
            over.append(time.monotonic() - t)
            action.append(r.info["action_seconds"])
            observe.append(r.info["settle_seconds"])  # settle capped at 0: one screenshot
        out["step_overhead_1920x1080_seconds"] = pct(over)
        out["step_overhead_action_seconds"] = pct(action)
        out["step_overhead_screenshot_seconds"] = pct(observe)
        await sb.release(ep.episode_id)
        ep = await sb.start_episode(EDITOR_TASK, full, SettleOptions())
        clicks, typing, settle = [], [], []
        for i in range(n):
            t = time.monotonic()
            r = await sb.step(ep.episode_id, f"pyautogui.click({900 + i}, 500)")
            clicks.append(time.monotonic() - t)
            settle.append(r.info["settle_seconds"])
            t = time.monotonic()
            await sb.step(ep.episode_id, "pyautogui.write('hello kubecua', interval=0.01)")
            typing.append(time.monotonic() - t)
        out["step_click_with_settle_seconds"] = pct(clicks)
        out["step_typing_with_settle_seconds"] = pct(typing)
        out["settle_seconds_click"] = pct(settle)
        resets = [(await sb.release(ep.episode_id)).reset_seconds]
        for _ in range(n - 1):
            ep = await sb.start_episode(TASK, full)
            resets.append((await sb.release(ep.episode_id)).reset_seconds)
        out["reset_seconds"] = pct(resets)
    return out


def screenshot_costs(desktop_url: str, token: str, n: int) -> dict[str, object]:
    from kubecua_episode.observe import encode

    grab, jpeg = [], []
    h = {"Authorization": f"Bearer {token}"}
    http = httpx.Client(headers=h, timeout=30)  # one keep-alive connection, as the episode server
    for _ in range(n):
        t = time.monotonic()
        png = http.get(desktop_url + "/screenshot").content
        grab.append(time.monotonic() - t)
        t = time.monotonic()
        encode(png, ObservationOptions(format="jpeg", max_pixels=1280 * 720))
        jpeg.append(time.monotonic() - t)
    http.close()
    return {"desktop_screenshot_capture_png_seconds": pct(grab),
            "reencode_jpeg_1280x720_seconds": pct(jpeg)}  # fmt: skip


def anchor(desktop_url: str, token: str, n: int) -> dict[str, object]:
    """Run on the desktop through its /execute (its X server wants the session's cookie)."""
    h = {"Authorization": f"Bearer {token}"}
    shots = []
    for _ in range(n):
        body = {"command": ["python3", "-c", ANCHOR]}
        r = httpx.post(desktop_url + "/execute", json=body, headers=h, timeout=60).json()
        if r.get("returncode") != 0:
            raise RuntimeError(f"anchor failed on the desktop: {r}")
        shots.append(float(r["output"].split()[-1]))
    # desktop-env's action path: a fresh `python3 -c "import pyautogui; ..."` (a shell command,
    # so the desktop server's warm executor does not take it), pause included.
    cold = []
    for i in range(n):
        code = f"import pyautogui, time; pyautogui.FAILSAFE = False; pyautogui.moveTo({i}, 9)"
        body = {"command": f"python3 -c '{code}'", "shell": True}
        t = time.monotonic()
        httpx.post(desktop_url + "/execute", json=body, headers=h, timeout=60).raise_for_status()
        cold.append(time.monotonic() - t)
    return {
        "osworld_anchor_action_seconds": pct(cold),
        "osworld_anchor_screenshot_png_seconds": pct(shots),
        "osworld_anchor_pause_seconds": 2.0,
        "osworld_anchor_step_seconds_excl_action": pct([s + 2.0 for s in shots]),
        "osworld_anchor_step_overhead_seconds": pct(
            [a + b for a, b in zip(cold, shots, strict=True)]
        ),
    }


def cold_start(runs: int) -> dict[str, object]:
    """podman run -> the episode server's /readyz answers 200 (desktop up, screen not black,
    baseline taken), from a stopped image each time."""
    have = subprocess.run([*PODMAN, "image", "exists", IMAGE], capture_output=True)
    if have.returncode != 0:
        return {"container_cold_start_seconds": f"skipped: {IMAGE} not built"}
    secret = Path(tempfile.mkdtemp(prefix="kubecua-bench-secret-"))
    (secret / "token").write_text(os.urandom(8).hex())
    secret.chmod(0o755)
    (secret / "token").chmod(0o644)
    times = []
    for i in range(runs):
        port, name = free_port(), f"kubecua-bench-{os.getpid()}-{i}"
        mount = f"{secret}:/var/run/secrets/kubecua:ro"
        cmd = [*PODMAN, "run", "-d", "--rm", "--name", name, *LIMITS,
               "-p", f"127.0.0.1:{port}:8000", "-v", mount, IMAGE]  # fmt: skip
        t = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True)
        try:
            while not _ready(f"http://127.0.0.1:{port}"):
                if time.monotonic() - t > 180:
                    raise RuntimeError("container not ready in 180 s")
                time.sleep(0.1)
            times.append(time.monotonic() - t)
        finally:
            subprocess.run([*PODMAN, "rm", "-f", "-t", "5", name], capture_output=True)
    return {"container_cold_start_seconds": pct(times), "container_cold_start_runs": times}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--cold-starts", type=int, default=3, help="container runs (0: skip)")
    args = p.parse_args()
    n = args.n
    work = Path(tempfile.mkdtemp(prefix="kubecua-bench-"))
    token = os.urandom(8).hex()
    (work / "token").write_text(token)
    port, dport, display = free_port(), free_port(), 300 + os.getpid() % 300
    cmd = [sys.executable, "-m", "kubecua_episode.local", "--display", str(display),
           "--episode-port", str(port), "--desktop-port", str(dport), "--cdp-port",
           str(free_port()), "--vlc-port", str(free_port()), "--token-file", str(work / "token"),
           "--workdir", str(work)]  # fmt: skip
    proc = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _ready(url):
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("bench: sandbox did not become ready")
            time.sleep(0.2)
        result = asyncio.run(measure(url, token, n))
        result.update(screenshot_costs(f"http://127.0.0.1:{dport}", token, n))
        result.update(anchor(f"http://127.0.0.1:{dport}", token, n))
        result["n"] = n
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    if args.cold_starts:  # after the local sandbox is gone, so the two do not compete
        result.update(cold_start(args.cold_starts))
    print(json.dumps(result, indent=2))


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
