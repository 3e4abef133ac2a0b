"""Faults of a two-process job (gloo on the CPU, two REAL local desktops), launched exactly as the
operator's Job does (`python -m kubecua_trainer.launch --module kubecua_trainer run ...`):

- SIGTERM to the launcher (a pod being suspended or evicted: the kubelet signals the container's
  first process): the ranks checkpoint the last completed step once and exit 0 (torchrun's agent
  sees no failed worker), the launcher exits 143 (stopped, not finished: a Job must not count the
  pod as a completed index), and a rerun continues from that step with the optimizer state it
  had, to the end, and exits 0;
- SIGKILL to one rank: the launcher tears the other one down and fails (a Job then starts the pod
  again), and a rerun resumes after the newest checkpoint with no completed step lost, here as
  one process (the spec changed to trainer.nodes 1: a change of world size). An episode the
  killed attempt left busy is released by the rerun at its start (sources/reclaim.py), not by
  the sandbox's 10-minute idle watchdog; another run's episode is left alone.

Needs `make sandbox-env` (skipped, saying so, without it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from test_distributed_learner import TRAINER_DIR
from test_distributed_run import (
    TASKS,
    desktop_spec,
    desktops,
    history,
    needs_desktops,
    write_manifest,
)
from test_metrics import free_port

from kubecua_sandbox_client import SandboxClient
from kubecua_trainer.launch import children
from kubecua_trainer.learning.checkpoint import list_checkpoints
from kubecua_trainer.sources.local import LocalSource
from kubecua_trainer.sources.reclaim import episode_id, owner_of, reclaim

__all__ = ["desktops"]  # the module-scoped fixture of two real desktops

pytestmark = needs_desktops


def launch_cmd(manifest: Path) -> list[str]:
    """The Job's command (operator/kubecua_operator/trainingrun/job.py) on one node."""
    return [sys.executable, "-m", "kubecua_trainer.launch", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            "--module", "kubecua_trainer", "run", str(manifest), "--no-progress"]  # fmt: skip


@pytest.fixture
def job(tmp_path: Path, tiny_model_dir: Path, desktops: LocalSource) -> Iterator[dict]:
    urls = [sb.url for sb in desktops.sandboxes]
    spec = desktop_spec(tmp_path, tiny_model_dir, urls, steps=5)
    env = {**os.environ, "KUBECUA_SANDBOX_TOKEN": desktops.token or ""}
    procs: list[subprocess.Popen] = []

    def start(every_steps: int, processes: int = 2) -> subprocess.Popen:
        spec["checkpoint"] = {"everySteps": every_steps, "keep": 10}
        spec["trainer"]["nodes"] = processes
        manifest = write_manifest(tmp_path / "run.yaml", spec)
        cmd = (
            launch_cmd(manifest)
            if processes > 1
            else [sys.executable, "-m", "kubecua_trainer", "run", str(manifest), "--no-progress"]
        )
        proc = subprocess.Popen(cmd, cwd=TRAINER_DIR, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        procs.append(proc)
        return proc

    yield {"start": start, "out": tmp_path / "out"}
    for proc in procs:  # a failed assertion leaves nothing running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for_step(proc: subprocess.Popen, out: Path, step: int, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while not any(r["step"] >= step for r in history(out)):
        assert proc.poll() is None, proc.communicate()[0].decode()[-4000:]
        assert time.monotonic() < deadline, f"no step {step} within {timeout} s"
        time.sleep(0.2)  # another process's files: nothing to wait on but the directory


def adam_steps(ckpt: Path) -> set[float]:
    """The AdamW step count of every parameter in a checkpoint's optimizer state."""
    saved = torch.load(ckpt / "optimizer.pt", weights_only=True)
    state = saved["optimizer_by_name" if "optimizer_by_name" in saved else "optimizer"]["state"]
    return {float(s["step"]) for s in state.values()}


def held_episodes(desktops: LocalSource) -> list[str]:
    async def held(url: str) -> str | None:
        async with SandboxClient(url, desktops.token) as client:
            return (await client.status()).episode_id

    async def all_held() -> list[str | None]:
        return list(await asyncio.gather(*(held(sb.url) for sb in desktops.sandboxes)))

    return [ep for ep in asyncio.run(all_held()) if ep is not None]


def rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return None
    found = [int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"RANK=")]
    return found[0] if found else None


def test_sigterm_to_the_launcher_checkpoints_once_exits_143_and_the_rerun_finishes_with_0(
    job: dict,
) -> None:
    out = job["out"]
    first = job["start"](every_steps=100)  # no checkpoint but the stop's (and the final one)
    wait_for_step(first, out, 2)
    assert list_checkpoints(out / "checkpoints") == []
    first.send_signal(signal.SIGTERM)  # the launcher only, as the kubelet signals PID 1
    log = first.communicate(timeout=300)[0].decode()
    assert first.returncode == 143, log[-4000:]  # 128 + SIGTERM: stopped before the last step
    completed = [r["step"] for r in history(out)]
    ckpts = list_checkpoints(out / "checkpoints")
    assert len(ckpts) == 1, (ckpts, log[-4000:])
    step, path = ckpts[0]
    assert step == completed[-1], (step, completed)  # the last completed step, nothing later
    assert 2 <= step < 5
    writers = [ln for ln in log.splitlines() if "checkpoint of step" in ln]
    assert len(writers) == 1, writers
    assert "written by rank 0" in writers[0]
    assert f"stopped by SIGTERM after step {step}" in log
    assert log.count("exitcode") == 0, log[-4000:]  # torchrun reports no failed worker
    assert adam_steps(path) == {float(step)}

    # The Job's next pod: the same command continues after the saved step to the end, with the
    # optimizer state the stop saved (AdamW's per-parameter step counts go on from it).
    second = job["start"](every_steps=100)
    log2 = second.communicate(timeout=400)[0].decode()
    assert second.returncode == 0, log2[-4000:]  # all steps done: the Job's index succeeds
    steps = [r["step"] for r in history(out)]
    assert steps == list(range(1, 6)), steps  # each step once: none lost, none repeated
    final = dict(list_checkpoints(out / "checkpoints"))[5]
    assert adam_steps(final) == {5.0}
    assert history(out)[step]["logprob_mismatch"] < 1e-4  # generation used the resumed weights


def test_a_killed_rank_ends_the_job_and_a_rerun_in_one_process_loses_no_completed_step(
    job: dict, desktops: LocalSource
) -> None:
    out = job["out"]
    first = job["start"](every_steps=1)
    wait_for_step(first, out, 2)
    ranks = {rank_of(pid): pid for pid in children(first.pid)}
    os.kill(ranks[1], signal.SIGKILL)
    log = first.communicate(timeout=300)[0].decode()
    assert first.returncode != 0, log[-4000:]  # a Job counts the pod as failed and starts it again
    assert all(rank_of(pid) is None for pid in ranks.values())  # rank 0 was torn down too
    completed = [r["step"] for r in history(out)]
    saved = [s for s, _ in list_checkpoints(out / "checkpoints")]
    # every completed step is saved (its checkpoint is written before its history row)
    assert completed[-1] <= saved[-1] <= completed[-1] + 1, (saved, completed)
    # What the killed rank (or rank 0, torn down) left busy, if the kill came mid-episode: the
    # run's own mark, so the rerun releases it at once instead of waiting for the watchdog.
    left = held_episodes(desktops)
    assert all(ep.startswith(owner_of("dist", None) + "-") for ep in left), left

    # The rerun, its spec changed to one process (trainer.nodes 1): a change of world size
    # resumes too, with the optimizer state the two ranks saved.
    second = job["start"](every_steps=1, processes=1)
    log2 = second.communicate(timeout=400)[0].decode()
    assert second.returncode == 0, log2[-4000:]  # one process that finished all steps: 0
    for ep in left:
        assert f"released episode {ep}" in log2, log2[-4000:]
    steps = [r["step"] for r in history(out)]
    assert steps == completed + list(range(saved[-1] + 1, 6)), steps
    assert adam_steps(dict(list_checkpoints(out / "checkpoints"))[5]) == {5.0}


def test_a_run_releases_the_episodes_its_earlier_attempt_left_and_no_other_runs(
    desktops: LocalSource,
) -> None:
    ours, theirs = (sb.url for sb in desktops.sandboxes)
    owner = owner_of("dist", None)
    left = episode_id(owner, "ep", "0123456789abcdef")  # a dead attempt's, as rollouts name them
    other = episode_id(owner_of("another-run", None), "ep", "0123456789abcdef")
    task = json.loads((TASKS / "files" / "create-hello-file.json").read_text())

    async def scenario() -> tuple[list[str], list[str]]:
        async with (
            SandboxClient(ours, desktops.token) as a,
            SandboxClient(theirs, desktops.token) as b,
        ):
            await a.start_episode(task, episode_id=left)
            await b.start_episode(task, episode_id=other)
            try:
                released = await reclaim([ours, theirs], desktops.token, owner)
                after = [(await a.status()).episode_id, (await b.status()).episode_id]
            finally:
                await b.release(other)
        return released, after

    released, after = asyncio.run(scenario())
    assert released == [left]
    assert after == [None, other]  # ours free again (reset and verified), theirs still running
