"""`kubecua tasks verify --max-sandboxes N` (a TaskVerification's spec.parallelism): verify() leases
at most N sandboxes at once, and a retired one frees its place. Played against the leasing
benchmark's in-process stand-in episode server (bench/episode_standin.py: answers at once, no
desktop), so it takes about a second and no cluster."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kubecua_tasks.verify import verify

from kubecua_sandbox_client import SandboxClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_leasing import write_tasks
from episode_standin import StandIn

URLS = [f"http://10.0.0.{i}:8000" for i in range(1, 7)]


async def play(folder: Path, max_sandboxes: int | None, dead: frozenset[str] = frozenset()):
    standin = StandIn("t" * 32)
    base = await standin.start()
    opened: list[str] = []

    def connect(url: str, token: str | None) -> SandboxClient:
        opened.append(url)
        host = url.split("//", 1)[1].split(":", 1)[0]
        # A dead sandbox: nothing listens there, so its first episode loses it (retired).
        target = "http://127.0.0.1:9" if url in dead else f"{base}/s/{host}"
        return SandboxClient(target, token, timeout=30)

    try:
        manifest = await verify(
            folder, URLS, standin.token, 2, connect=connect, max_sandboxes=max_sandboxes
        )
    finally:
        await standin.stop()
    return manifest, opened


def test_at_most_n_sandboxes_play(tmp_path: Path) -> None:
    write_tasks(tmp_path, 4)
    manifest, opened = asyncio.run(play(tmp_path, 2))
    assert len(opened) == 2  # two workers, each its sandbox's one client
    assert sorted(manifest.sandboxes) == sorted(opened)
    assert manifest.summary["verified"] == 4
    everyone, _ = asyncio.run(play(tmp_path, None))
    assert len(everyone.sandboxes) == len(URLS)


def test_a_retired_sandbox_frees_its_place(tmp_path: Path) -> None:
    write_tasks(tmp_path, 2)
    manifest, opened = asyncio.run(play(tmp_path, 1, dead=frozenset(URLS[:1])))
    assert opened[0] == URLS[0]  # sorted first, and dead: retired after its first episode
    assert URLS[0] not in manifest.sandboxes
    assert len(manifest.sandboxes) == 1
    assert manifest.summary["verified"] == 2
