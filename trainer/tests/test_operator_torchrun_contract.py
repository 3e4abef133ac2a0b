"""The operator's Job contract drives the distributed trainer: two torchrun agents (two "pods",
node ranks 0 and 1) started with exactly the command and the PET_* / KUBECUA_* variables that
operator/kubecua_operator/trainingrun/job.py gives the trainer container, on loopback sandboxes,
the TrainingRun on the real control plane: one job, one status patch per step, from rank 0;
each pod's metrics endpoint shows the job's step and checkpoint, rank 0's alone counts episodes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from control_plane import require_control_plane
from kubernetes import client
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_distributed_learner import TRAINER_DIR
from test_distributed_run import write_manifest
from test_lifecycle_sigterm import metric, wait_for
from test_metrics import free_port
from test_status_and_pool_source import api, training_run  # noqa: F401  (the CRD fixture)
from test_train import local_run

from kubecua_trainer.learning.checkpoint import list_checkpoints
from kubecua_trainer.telemetry.status import GROUP, PLURAL, VERSION

require_control_plane()


def total(port: int, name: str) -> float:
    """The sum of a metric's series (all label values) on an endpoint."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(name))


def job_env(node_rank: int, nodes: int, port: int, namespace: str) -> dict[str, str]:
    """The trainer container's env as trainingrun/job.py writes it (the master address is the
    headless Service name in a cluster, loopback here)."""
    return {
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": "1",  # max(1, gpusPerNode) with gpusPerNode 0
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "KUBECUA_TRAININGRUN_NAME": "r",
        "KUBECUA_TRAININGRUN_NAMESPACE": namespace,
        "KUBECUA_RESUME": "latest",
    }


def test_operator_job_command_and_env_run_one_job(
    api,  # noqa: F811
    namespace,
    cluster,
    tmp_path: Path,
    tiny_model_dir: Path,
) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, training_run("r"))
    # "slow": every episode start takes 3 s, so the metrics of step 1 can be read mid-run
    with LoopbackSandbox({"slow"}) as a, LoopbackSandbox({"slow"}) as b:
        spec = local_run(tmp_path, tiny_model_dir, [a.url, b.url], steps=2, port=0).spec
        body = spec.model_dump(by_alias=True, exclude_none=True)
        body["trainer"]["nodes"] = 2
        body["checkpoint"] = {"everySteps": 1, "keep": 3}
        config = write_manifest(tmp_path / "trainingrun.yaml", body, "r")
        token = tmp_path / "token"
        token.write_text(TOKEN)
        port = free_port()
        # job.py's trainer_command for 2 processes:
        # python -m kubecua_trainer.launch --module kubecua_trainer run <config>
        cmd = [sys.executable, "-m", "kubecua_trainer.launch", "--module", "kubecua_trainer",
               "run", str(config), "--no-progress"]  # fmt: skip
        procs = []
        ports = [free_port(), free_port()]  # each pod's metrics endpoint (pods have their own IP)
        for rank in (0, 1):
            env = {**os.environ, **job_env(rank, 2, port, namespace),
                   "KUBECUA_SANDBOX_TOKEN_FILE": str(token),
                   "KUBECONFIG": str(cluster.kubeconfig)}  # fmt: skip
            out = subprocess.PIPE
            procs.append(subprocess.Popen([*cmd, "--metrics-port", str(ports[rank])],
                                          cwd=TRAINER_DIR, env=env, text=True, stdout=out,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        try:
            # node 1's endpoint shows the job's step and checkpoint; node 0's alone counts
            wait_for(lambda: (metric(ports[1], "kubecua_trainer_step") or 0) >= 1, 300, "step 1")
            checkpoint = "kubecua_trainer_last_checkpoint_timestamp_seconds"
            assert (metric(ports[1], checkpoint) or 0) > 0
            assert total(ports[1], "kubecua_trainer_episodes_total") == 0
            assert total(ports[0], "kubecua_trainer_episodes_total") >= 2
        finally:
            logs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(x[-3000:] for x in logs)
    # step patches only: the live-view link and cost are patched apart, carrying no step
    patches = [ln for log in logs for ln in log.splitlines()
               if f"status of {namespace}/r" in ln and not ln.endswith("step None")]  # fmt: skip
    assert [ln.rsplit("step ", 1)[1] for ln in patches] == ["1", "2"], patches
    assert not any("status of" in ln for ln in logs[1].splitlines())  # node 1 never patches
    status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "r")["status"]
    assert status["step"] == 2
    assert status["totalSteps"] == 2
    assert status["lastCheckpoint"]["step"] == 2
    assert [s for s, _ in list_checkpoints(tmp_path / "out/checkpoints")] == [1, 2]
    assert "done: 2 steps" in logs[0]
    assert "done:" not in logs[1]
