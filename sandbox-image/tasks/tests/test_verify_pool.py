"""`kubecua tasks verify --pool NAME`: the pool's sandboxes are found by its EndpointSlices on a
real API server (kubecua_testkit's local control plane), as the trainer finds them, and leased
through the episode API: a sandbox another client holds answers 409 and verification waits for
it instead of failing, and a sandbox that never answers is retired without a verdict against the
task. The pool's sandboxes are a local desktop and a dead URL, named by the slices' URL
annotation as an external pool's are (the API server refuses loopback addresses in slices).
One desktop, one task, six episodes: about 40 s with the control plane's start."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubecua_tasks.builtin import TASKS_DIR
from kubecua_tasks.desktops import LAUNCHER, local_desktops
from kubernetes import client

from kubecua_api.constants import POOL_LABEL, URL_ANNOTATION
from kubecua_api.taskmanifest import VerifiedManifest
from kubecua_sandbox_client import SandboxClient
from kubecua_testkit.cluster import Cluster

KUBECUA = Path(sys.executable).parent / "kubecua"
HOLD_SECONDS = 4.0
DEAD = "http://127.0.0.1:9"


def _slice(pool: str, url: str, index: str = "0") -> client.V1EndpointSlice:
    return client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(
            name=f"{pool}-{index}", labels={POOL_LABEL: pool}, annotations={URL_ANNOTATION: url}
        ),
        address_type="IPv4",
        endpoints=[
            client.V1Endpoint(
                addresses=["192.0.2.10"], conditions=client.V1EndpointConditions(ready=True)
            )
        ],
        ports=[client.DiscoveryV1EndpointPort(name="episodes", port=8000)],
    )


@pytest.mark.skipif(not LAUNCHER.exists(), reason="no local sandbox launcher: make sandbox-env")
def test_verify_leases_the_pools_sandbox_and_waits_while_another_holds_it(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    folder = tmp_path / "tasks/files"
    folder.mkdir(parents=True)
    for name in ("create-hello-file.json", "create-hello-file.solutions.json"):
        shutil.copy(TASKS_DIR / "files" / name, folder / name)

    async def run() -> subprocess.CompletedProcess[str]:
        async with local_desktops(1) as (urls, token):
            disc = client.DiscoveryV1Api(cluster.api_client())
            disc.create_namespaced_endpoint_slice(namespace, _slice("desks", urls[0]))
            # a second sandbox that never answers (nothing listens on port 9): it is retired
            # and its episode played on the other, never judged as the task's fault
            disc.create_namespaced_endpoint_slice(namespace, _slice("desks", DEAD, "1"))
            (tmp_path / "token").write_text(token)
            async with SandboxClient(urls[0], token) as other:  # another trainer's lease
                held = await other.start_episode({"id": "x", "instruction": "x", "config": [],
                                                  "evaluator": {"func": "infeasible"}})  # fmt: skip
                env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
                proc = await asyncio.create_subprocess_exec(
                    str(KUBECUA), "tasks", "verify", str(tmp_path / "tasks"), "--pool", "desks",
                    "--namespace", namespace, "--token-file", str(tmp_path / "token"),
                    env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
                await asyncio.sleep(HOLD_SECONDS)
                assert proc.returncode is None  # still waiting for the held sandbox
                await other.release(held.episode_id)
            out, err = await asyncio.wait_for(proc.communicate(), 600)
            return subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())

    t0 = time.monotonic()
    done = asyncio.run(run())
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = VerifiedManifest.model_validate_json((tmp_path / "tasks/verified.json").read_text())
    assert len(manifest.sandboxes) == 1  # the dead one retired
    assert manifest.sandboxes[0] != DEAD
    (task,) = manifest.tasks
    assert (task.id, task.verdict, task.reproducible_start) == (
        "create-hello-file",
        "verified",
        True,
    )
    assert task.scores == {"reference": [1.0, 1.0], "noop": [0.0, 0.0], "wrong": [0.0, 0.0]}
    assert time.monotonic() - t0 > HOLD_SECONDS


def test_a_pool_without_ready_sandboxes_is_an_error_that_names_it(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    for name in ("create-hello-file.json", "create-hello-file.solutions.json"):
        shutil.copy(TASKS_DIR / "files" / name, folder / name)
    (tmp_path / "token").write_text("t")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(
        [str(KUBECUA), "tasks", "verify", str(tmp_path), "--pool", "nobody", "--namespace",
         namespace, "--token-file", str(tmp_path / "token")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"--pool nobody: no ready sandboxes in namespace {namespace}" in done.stderr
