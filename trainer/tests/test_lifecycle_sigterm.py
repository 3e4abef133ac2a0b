"""Suspend, as the operator does it: the trainer pod gets SIGTERM. A real trainer process (the CLI
on the tiny model, loopback sandboxes, its TrainingRun on the real control plane) must abandon the
rollout in flight, checkpoint its last completed step, patch that into its status, exit 143
(128 + SIGTERM: stopped, not finished, so the Job never counts the pod as a completed index), and
a later run must resume after that step. The `Stop` rules are also checked on plain coroutines.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from control_plane import require_control_plane
from kubernetes import client
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_metrics import free_port
from test_status_and_pool_source import api, training_run  # noqa: F401  (the CRD fixture)
from test_train import local_run

from kubecua_trainer.config import API_VERSION, KIND
from kubecua_trainer.learning.checkpoint import checkpoint_time, list_checkpoints
from kubecua_trainer.run.train import RunOptions, Stop, train
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.telemetry.status import GROUP, PLURAL, VERSION

require_control_plane()
TRAINER_DIR = Path(__file__).resolve().parents[1]


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def metric(port: int, name: str) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(values[0]) if values else None


def write_manifest(tmp_path: Path, model_dir: Path, urls: list[str], port: int) -> Path:
    spec = local_run(tmp_path, model_dir, urls, steps=6, port=port).spec
    body = spec.model_dump(by_alias=True, exclude_none=True)
    body["algorithm"].update(groupSize=2, tasksPerStep=1)  # 2 episodes a step: one per sandbox
    body["checkpoint"] = {"everySteps": 100, "keep": 2}  # only the final or a stop's checkpoint
    path = tmp_path / "run.yaml"
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "r"}, "spec": body}
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_sigterm_checkpoints_last_completed_step_and_a_rerun_resumes(
    api,  # noqa: F811
    namespace,
    cluster,
    tmp_path: Path,
    tiny_model_dir: Path,
) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, training_run("r"))
    port = free_port()
    # "slow": every episode start takes 3 s, so a SIGTERM after step 1 lands mid-rollout.
    with LoopbackSandbox({"slow"}) as a, LoopbackSandbox({"slow"}) as b:
        manifest = write_manifest(tmp_path, tiny_model_dir, [a.url, b.url], port)
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "KUBECUA_SANDBOX_TOKEN": TOKEN}
        cluster_args = ["--trainingrun", "r", "--namespace", namespace]
        cmd = [sys.executable, "-m", "kubecua_trainer", "run", str(manifest), "--no-progress"]
        cmd += [*cluster_args, "--metrics-addr", "127.0.0.1"]
        proc = subprocess.Popen(
            cmd, cwd=TRAINER_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            wait_for(lambda: (metric(port, "kubecua_trainer_step") or 0) >= 1, 240, "step 1")
            # no checkpoint yet (everySteps 100): the stop must write one
            assert metric(port, "kubecua_trainer_last_checkpoint_timestamp_seconds") is None
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = out.decode()
    assert proc.returncode == 143, log
    checkpoints = list_checkpoints(tmp_path / "out/checkpoints")
    assert len(checkpoints) == 1, log
    step = checkpoints[0][0]
    # never lose completed work: the checkpoint is the newest step whose episodes were recorded
    recorded = sorted(
        int(p.stem.split("-")[1]) for p in (tmp_path / "out/episodes").glob("*.jsonl")
    )
    assert 1 <= step < 6
    assert recorded[-1] == step, (recorded, step)
    assert f"stopped by SIGTERM after step {step}" in log
    status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "r")["status"]
    assert status["step"] == step
    assert status["lastCheckpoint"]["step"] == step
    assert status["lastCheckpoint"]["path"] == str(checkpoints[0][1])

    # the next run of the same spec starts right after the saved step and reports its age
    asyncio.run(resume_and_check(tmp_path, tiny_model_dir, step))


async def resume_and_check(tmp_path: Path, model_dir: Path, saved: int) -> None:
    seen: list[int] = []
    stamps: list[float | None] = []
    port = free_port()

    def on_step(step: int, stats: dict) -> None:
        seen.append(step)
        stamps.append(metric(port, "kubecua_trainer_last_checkpoint_timestamp_seconds"))

    with LoopbackSandbox() as a:
        run = local_run(tmp_path, model_dir, [a.url], steps=saved + 1, port=port)
        run.spec.algorithm.group_size, run.spec.algorithm.tasks_per_step = 2, 1
        opts = RunOptions(console=False, source=StaticSource([a.url], TOKEN), on_step=on_step)
        result = await train(run, opts)
    assert seen == [saved + 1]
    assert result.stopped_at is None
    assert result.last_checkpoint is not None
    assert Path(result.last_checkpoint).name == f"step-{saved + 1:08d}"
    assert stamps == [checkpoint_time(result.last_checkpoint)]  # the final step's checkpoint


@pytest.mark.asyncio
async def test_stop_abandons_work_in_flight() -> None:
    stop, cancelled = Stop(), asyncio.Event()

    async def rollout() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "finished"

    asyncio.get_running_loop().call_later(0.05, stop.requested.set)
    assert await stop.unless_stopped(rollout()) == (False, None)
    assert cancelled.is_set()


@pytest.mark.asyncio
async def test_stop_lets_an_update_that_began_finish() -> None:
    stop = Stop()

    async def step() -> dict:
        stop.finishing = True  # rollout done: the optimizer step is under way
        stop.requested.set()
        await asyncio.sleep(0.1)
        return {"step": 3}

    assert await stop.unless_stopped(step()) == (True, {"step": 3})


@pytest.mark.asyncio
async def test_sigterm_handler_sets_the_stop_and_is_removed() -> None:
    stop = Stop()
    stop.listen(signal.SIGTERM)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.requested.wait(), 5)
    finally:
        stop.close()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
