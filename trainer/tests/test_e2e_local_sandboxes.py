"""End to end: the trainer against two REAL local sandboxes (Xvfb desktops + episode servers from
`kubecua-sandbox-local`) completes GRPO steps with real evaluator rewards from the offline task
suite; a sandbox killed in the middle of an episode is excluded from the loss and counted.

Needs `make sandbox-env` (skipped, saying so, when the launcher is missing). ~2-4 minutes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from kubecua_trainer.config import API_VERSION, KIND, parse_training_run
from kubecua_trainer.rollout.records import EXCLUDED
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.local import LocalSource, launcher_path

DEAD = "http://127.0.0.1:9"  # the discard port: connection refused
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "sandbox-image" / "tasks"

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.skipif(
        not launcher_path().exists() or not TASKS.exists(),
        reason=f"{launcher_path()} or {TASKS} missing: run `make sandbox-env`",
    ),
]


async def kill_when_busy(source: LocalSource, index: int) -> str:
    """SIGKILL sandbox `index` (its whole process group) once it runs an episode."""
    sb = source.sandboxes[index]
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {source.token}"}) as http:
        async with asyncio.timeout(600):
            while True:
                if (await http.get(f"{sb.url}/readyz")).json().get("busy"):
                    break
                await asyncio.sleep(0.05)  # no event to wait on across processes
    os.killpg(sb.process.pid, signal.SIGKILL)
    return sb.url


async def test_trainer_on_two_real_sandboxes(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = {
        "model": {"path": str(tiny_model_dir), "dtype": "float32"},
        "sandboxes": {"local": {"replicas": 2}, "minReady": 2},
        "tasks": {"path": str(TASKS), "ids": ["create-hello-file", "terminal-mkdir"]},
        "algorithm": {
            "groupSize": 2,
            "tasksPerStep": 1,
            "maxTurns": 2,
            "maxNewTokens": 8,
            "dynamicSampling": False,
        },
        "rollout": {"maxPixels": 112 * 112, "episodeTimeoutSeconds": 240},
        "trainer": {"gradientCheckpointing": False},
        "checkpoint": {"everySteps": 2},
        "metrics": {"port": 0},
        "steps": 2,
        "outputDir": str(tmp_path / "out"),
    }
    run = parse_training_run(
        {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "e2e"}, "spec": spec}
    )
    source = LocalSource(2, tmp_path / "sandboxes", start_timeout=300)
    killer: asyncio.Task[str] | None = None
    started = []
    original_start = source.start

    async def start_then_arm(leases):  # arm the kill once the sandboxes exist
        nonlocal killer
        await original_start(leases)
        started.extend(source.sandboxes)
        # Discovery keeps reporting a sandbox that refuses connections (a stale endpoint).
        report = leases.set_ready
        leases.set_ready = lambda urls: report([*urls, DEAD])  # type: ignore[method-assign]
        report([*leases.ready, DEAD])
        killer = asyncio.create_task(kill_when_busy(source, 1))

    source.start = start_then_arm  # type: ignore[method-assign]
    result = await train(run, RunOptions(console=False, source=source))
    assert killer is not None
    assert killer.done()
    assert [row["step"] for row in result.history] == [1, 2]
    excluded = sum(n for k, n in result.outcomes.items() if k in EXCLUDED)
    scored = result.outcomes["success"] + result.outcomes["failure"]
    assert result.outcomes["setup_failed"] >= 1, result.outcomes  # at least the refusing URL
    assert scored >= 2, result.outcomes  # the other sandbox kept scoring with the evaluator
    assert excluded + scored == 4
    episodes = [
        line
        for f in sorted((tmp_path / "out/episodes").glob("step-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    rows = [json.loads(x) for x in episodes]
    assert all(r["reward"] is None for r in rows if r["outcome"] in EXCLUDED)
    assert all(0.0 <= r["reward"] <= 1.0 for r in rows if r["reward"] is not None)
    assert len(started) == 2
    orphans = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(tmp_path) in _read(p)]
    assert orphans == []  # the killed sandbox's desktop session was reaped too
    assert all(sb.process.poll() is not None for sb in started)  # all stopped on exit


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return ""
