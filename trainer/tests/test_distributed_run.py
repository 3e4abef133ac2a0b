"""The trainer as one job over two processes (`torchrun --nproc-per-node 2`, gloo on the CPU)
against two REAL local desktops (Xvfb + episode servers, real evaluators), with
rollout.maxStaleness 1: the run completes its steps, both ranks' episodes are gathered, rank 0
alone writes each checkpoint, step 2's rollout overlaps step 1's learning, no sample is older than
the bound; killed (SIGKILL, launcher and ranks) after step 2, a rerun resumes right after the
newest checkpoint; the report on rank 0 shows both ranks' screenshots. Needs
`make sandbox-env` (skipped, saying so, without it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_distributed_learner import TORCHRUN, TRAINER_DIR
from test_metrics import free_port

from kubecua_trainer.config import API_VERSION, KIND
from kubecua_trainer.learning.checkpoint import list_checkpoints
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.local import LocalSource, launcher_path

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "sandbox-image" / "tasks"
needs_desktops = pytest.mark.skipif(
    not launcher_path().exists() or not TASKS.exists(),
    reason=f"{launcher_path()} or {TASKS} missing: run `make sandbox-env`",
)


@pytest.fixture(scope="module")
def desktops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSource]:
    """Two real local desktops, shared by the ranks (they take turns through the 409)."""
    source = LocalSource(2, tmp_path_factory.mktemp("desktops"), start_timeout=300)
    asyncio.run(source.start(SandboxLeases()))
    try:
        yield source
    finally:
        asyncio.run(source.stop())


def write_manifest(path: Path, spec: dict, name: str = "dist") -> Path:
    obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
    path.write_text(yaml.safe_dump(obj))
    return path


def desktop_spec(tmp_path: Path, model_dir: Path, urls: list[str], steps: int) -> dict:
    return {
        "model": {"path": str(model_dir), "dtype": "float32"},
        "sandboxes": {"urls": urls, "minReady": 2},
        "tasks": {"path": str(TASKS), "ids": ["create-hello-file", "terminal-mkdir"]},
        "algorithm": {"groupSize": 2, "tasksPerStep": 2, "maxTurns": 2, "maxNewTokens": 8,
                      "dynamicSampling": False, "learningRate": 1e-4},
        "rollout": {"maxPixels": 112 * 112, "episodeTimeoutSeconds": 240, "maxStaleness": 1},
        "trainer": {"gradientCheckpointing": False, "nodes": 2},
        "checkpoint": {"everySteps": 1, "keep": 5},
        "metrics": {"port": 0},
        "steps": steps,
        "outputDir": str(tmp_path / "out"),
    }  # fmt: skip


def history(out: Path) -> list[dict]:
    path = out / "history.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@needs_desktops
def test_two_ranks_on_real_desktops_train_resume_and_overlap_rollouts(
    tmp_path: Path, tiny_model_dir: Path, desktops: LocalSource
) -> None:
    urls = [sb.url for sb in desktops.sandboxes]
    manifest = write_manifest(
        tmp_path / "run.yaml", desktop_spec(tmp_path, tiny_model_dir, urls, 3)
    )
    env = {**os.environ, "KUBECUA_SANDBOX_TOKEN": desktops.token or ""}
    cmd = [str(TORCHRUN), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "-m", "kubecua_trainer", "run", str(manifest),
           "--no-progress"]  # fmt: skip
    out = tmp_path / "out"
    # First run: killed (the whole launcher and its ranks, SIGKILL) once step 2 is checkpointed.
    first = subprocess.Popen(cmd, cwd=TRAINER_DIR, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while not any(r["step"] == 2 for r in history(out)):
            assert first.poll() is None, first.communicate()[0].decode()[-4000:]
            assert time.monotonic() < deadline, "no checkpoint of step 2"
            time.sleep(0.2)  # another process's files: nothing to wait on but the directory
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        log1 = first.communicate()[0].decode()
    rows = history(out)
    assert [r["step"] for r in rows][:2] == [1, 2], log1[-4000:]
    one, two = rows[0], rows[1]
    assert one["episodes"] == two["episodes"] == 4  # both ranks' episodes were gathered
    assert two["rollout_started_at"] < one["learn_ended_at"]  # step 2 played while 1 learned
    assert two["rollout_ended_at"] > one["learn_started_at"]
    assert all(r["staleness_max"] <= 1 for r in rows)
    assert one["logprob_mismatch"] < 1e-4  # ranks generated with the learner's own weights
    writers = [ln for ln in log1.splitlines() if "checkpoint of step" in ln]
    assert [ln.split("written by rank ")[1][:1] for ln in writers] == ["0"] * len(writers)
    assert len(writers) == len({ln.split(":")[1] for ln in writers})  # once per step
    # rank 0's report has the screenshots of both ranks' episodes (sent to it alone)
    shown = {
        (int(ep["key"].split("-g")[1][:2]) * 2 + int(ep["key"].split("-e")[1])) % 2
        for ep in map(json.loads, (out / "episodes/step-0001.jsonl").read_text().splitlines())
        if any(
            p and (out / "episodes" / p).is_file()
            for p in [*(t["screenshot"] for t in ep["turns"]), ep["final_screenshot"]]
        )
    }
    assert shown == {0, 1}, shown
    ckpt = dict(list_checkpoints(out / "checkpoints"))[2]
    assert json.loads((ckpt / "trainer_state.json").read_text())["extra"]["world_size"] == 2

    # Second run of the same spec: resumes right after the newest checkpoint and finishes.
    last = max(s for s, _ in list_checkpoints(out / "checkpoints"))
    second = subprocess.run(cmd, cwd=TRAINER_DIR, env=env, capture_output=True, text=True,
                            timeout=400)  # fmt: skip
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    rows = history(out)
    steps = [r["step"] for r in rows]
    assert steps[-1] == 3, steps
    assert steps.count(3) == 1, steps
    if last < 3:
        resumed = rows[-1]
        assert resumed["step"] == last + 1
        assert resumed["staleness_max"] == 0  # the first rollout after a resume is fresh
    assert "done: 3 steps" in second.stdout  # the report keeps the first run's steps
