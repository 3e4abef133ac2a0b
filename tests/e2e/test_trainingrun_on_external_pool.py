"""The whole product on one machine: the operator reconciles an external SandboxPool of real
local desktops (Xvfb + episode server), the trainer's label-selector source discovers exactly the
ready ones as the pool changes, and a trainer run from outside the cluster trains one GRPO step
against them and patches its TrainingRun's status.

kwok would complete the operator's trainer Job at once (it plays a kubelet whose pods finish), so
the run asks for an unschedulable CPU amount: its Job pod stays Pending and the trainer runs here,
as an out-of-cluster process, reading the same TrainingRun object."""

from __future__ import annotations

import json
import queue
import secrets
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kubecua_testkit.components import (
    VENV_PYTHON,
    free_port,
    start_operator,
    start_sandbox,
    wait_sandboxes_ready,
)
from kubecua_testkit.tools import REPO

POOL, RUN, TASK = "desks", "tiny", "archive-docs"
WATCH_POOL = """
import asyncio, json, sys
from kubecua_trainer.sources.kube import PoolSource

class Printer:  # stands in for SandboxLeases: prints every ready set the source publishes
    def set_ready(self, urls):
        print(json.dumps(sorted(urls)), flush=True)

async def main():
    await PoolSource(sys.argv[1], sys.argv[2], token=None).start(Printer())
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory):
    """CRDs, two real local sandboxes sharing one token, and the operator."""
    root = tmp_path_factory.mktemp("stack")
    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/sandboxpools.kubecua.dev", "crd/trainingruns.kubecua.dev",
    )  # fmt: skip
    token = root / "token"
    token.write_text(secrets.token_hex(16))
    sandboxes = [start_sandbox(root / f"sandbox-{i}", token) for i in range(2)]
    operator = None
    try:
        operator, _ = start_operator(cluster.kubeconfig, root)
        wait_sandboxes_ready(sandboxes)
        yield {"root": root, "token": token, "sandboxes": sandboxes}
    finally:
        for proc in [s.process for s in sandboxes] + ([operator] if operator else []):
            proc.stop()


class LineReader:
    """Lines of a child's stdout, read on a thread so waits can time out."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout

        def pump() -> None:
            for line in out:
                self.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, want: list[str], timeout: float) -> float:
        """Seconds until a line equal to `want` (as JSON) arrives."""
        start = time.monotonic()
        while (left := timeout - (time.monotonic() - start)) > 0:
            try:
                if json.loads(self.lines.get(timeout=left)) == want:
                    return time.monotonic() - start
            except queue.Empty:
                break
        raise TimeoutError(f"the pool watcher never published {want}")


def apply_pool(cluster, namespace: str, urls: list[str], token: Path) -> None:
    # The pool's token Secret exists first, so the operator uses it rather than generating one.
    cluster.kubectl(
        "create", "secret", "generic", f"{POOL}-sandbox-token", "-n", namespace,
        f"--from-file=token={token}",
    )  # fmt: skip
    pool = {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": {"replicas": len(urls), "backend": "external",
                 "desktop": {"external": {"endpoints": urls}}},
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pool))


def wait_pool_ready(cluster, namespace: str, ready: int) -> None:
    cluster.kubectl(
        "wait", f"sandboxpool/{POOL}", "-n", namespace, "--timeout=90s",
        f"--for=jsonpath={{.status.readyReplicas}}={ready}",
    )  # fmt: skip


def test_trainer_discovers_exactly_the_ready_sandboxes(cluster, namespace, stack):
    sandboxes = stack["sandboxes"]
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: never ready
    apply_pool(cluster, namespace, [s.url for s in sandboxes] + [dead], stack["token"])
    wait_pool_ready(cluster, namespace, 2)
    watcher = subprocess.Popen(
        [str(VENV_PYTHON["trainer"]), "-c", WATCH_POOL, POOL, namespace],
        stdout=subprocess.PIPE, text=True, env={"KUBECONFIG": str(cluster.kubeconfig)},
    )  # fmt: skip
    try:
        lines = LineReader(watcher)
        lines.wait_for(sorted(s.url for s in sandboxes), timeout=60)
        sandboxes[1].process.stop()  # this desktop goes away: it must drop out of discovery
        lines.wait_for([sandboxes[0].url], timeout=60)
        wait_pool_ready(cluster, namespace, 1)
    finally:
        watcher.kill()
        watcher.wait(10)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny-qwen2_5_vl"
    subprocess.run(
        [str(VENV_PYTHON["trainer"]), "-m", "kubecua_trainer.tiny_models", str(out),
         "--family", "qwen2_5_vl"],
        check=True, cwd=REPO / "trainer", timeout=300, capture_output=True,
    )  # fmt: skip
    return out


def run_manifest(namespace: str, model: Path, out: Path) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": RUN, "namespace": namespace},
        "spec": {
            "model": {"path": str(model), "dtype": "float32"},
            "sandboxes": {"poolRef": POOL, "minReady": 1,
                          "tokenSecretRef": f"{POOL}-sandbox-token"},
            "tasks": {"path": str(REPO / "sandbox-image" / "tasks"), "ids": [TASK]},
            "algorithm": {"groupSize": 2, "maxTurns": 1, "maxNewTokens": 8,
                          "dynamicSampling": False},
            "rollout": {"maxPixels": 50176, "keepScreenshots": 1, "episodeTimeoutSeconds": 240},
            # Unschedulable on purpose: kwok would "complete" the trainer pod at once.
            "trainer": {"gradientCheckpointing": False,
                        "resources": {"requests": {"cpu": "1000"}}},
            "checkpoint": {"path": str(out / "ckpt"), "everySteps": 1},
            "steps": 1,
            "outputDir": str(out),
        },
    }  # fmt: skip


def test_out_of_cluster_trainer_trains_and_patches_its_status(
    cluster, namespace, stack, tiny_model, tmp_path
):
    sandbox = stack["sandboxes"][0]
    apply_pool(cluster, namespace, [sandbox.url], stack["token"])
    wait_pool_ready(cluster, namespace, 1)
    manifest = run_manifest(namespace, tiny_model, tmp_path)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    trainer = subprocess.run(
        [str(VENV_PYTHON["trainer"]), "-m", "kubecua_trainer", "run", "--trainingrun", RUN,
         "--namespace", namespace, "--metrics-port", "0", "--no-progress"],
        cwd=REPO / "trainer", capture_output=True, text=True, timeout=600,
        env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert trainer.returncode == 0, trainer.stderr[-4000:]
    run = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        "kubecua.dev", "v1alpha1", namespace, "trainingruns", RUN
    )
    status = run["status"]
    assert (status["step"], status["totalSteps"]) == (1, 1)
    assert 0.0 <= status["meanReward"] <= 1.0
    assert status["lastCheckpoint"]["step"] == 1
    assert Path(status["lastCheckpoint"]["path"]).is_dir()
    ready = next(c for c in status["conditions"] if c["type"] == "SandboxesReady")
    assert ready["status"] == "True"
    # Both episodes of the group were played and scored by the real evaluator, none lost.
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [(h["step"], h["episodes"], h["excluded"]) for h in history] == [(1, 2, 0)]
    episodes = (tmp_path / "episodes" / "step-0001.jsonl").read_text().splitlines()
    assert {json.loads(e)["outcome"] for e in episodes} <= {"success", "failure"}
