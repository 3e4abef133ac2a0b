"""`kubecua tasks verify --pool NAME`: the pool's sandboxes are found by its EndpointSlices on a
real API server (kubecua_testkit's local control plane), as the trainer finds them, and leased
through the episode API: a sandbox another client holds answers 409 and verification waits for
it instead of failing, and a sandbox that never answers is retired without a verdict against the
task. The pool's sandboxes are a local desktop and a dead URL, named by the slices' URL
annotation as an external pool's are (the API server refuses loopback addresses in slices).
One desktop, one task, six episodes: about 40 s with the control plane's start. The pool is
followed while verification runs: a sandbox that turns ready later plays, one that leaves does
not (two desktops, about a minute more)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubecua_tasks.builtin import TASKS_DIR
from kubecua_tasks.desktops import LAUNCHER, local_desktops
from kubernetes import client

from kubecua_api.constants import (
    GROUP,
    MANAGED_BY_LABEL,
    OPERATOR_MANAGER,
    POOL_LABEL,
    SANDBOX_LABEL,
    SANDBOXPOOL_KIND,
    SANDBOXPOOL_PLURAL,
    URL_ANNOTATION,
    VERSION,
)
from kubecua_api.taskmanifest import VerifiedManifest
from kubecua_sandbox_client import SandboxClient
from kubecua_testkit.cluster import Cluster

KUBECUA = Path(sys.executable).parent / "kubecua"
HOLD_SECONDS = 4.0
DEAD = "http://127.0.0.1:9"
TRAP = "http://127.0.0.1:7"  # a foreign slice's URL: the pool's token must never go there
POOL_CRD = Path(__file__).resolve().parents[3] / "crds/kubecua.dev_sandboxpools.yaml"


def _install_pool_crd(cluster: Cluster) -> None:
    ext = client.ApiextensionsV1Api(cluster.api_client())
    body = yaml.safe_load(POOL_CRD.read_text())
    with contextlib.suppress(client.ApiException):  # 409: a former test installed it
        ext.create_custom_resource_definition(body)
    for _ in range(300):
        conds = ext.read_custom_resource_definition(body["metadata"]["name"]).status.conditions
        if any(c.type == "Established" and c.status == "True" for c in conds or []):
            return
        time.sleep(0.2)
    raise TimeoutError("the SandboxPool CRD was never Established")


def _pool(cluster: Cluster, namespace: str, pool: str, urls: list[str]) -> str:
    """The pool and, as the operator makes them for an external pool, a Service and a slice per
    sandbox (the slice naming the sandbox's URL); plus a foreign slice, labelled for the pool
    but made by someone else, whose URL must never be played. Returns the pool's uid."""
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)
    placeholders = [f"http://192.0.2.{10 + i}:8000" for i in range(len(urls))]  # never dialled
    obj = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SANDBOXPOOL_PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": SANDBOXPOOL_KIND, "metadata": {"name": pool},
        "spec": {"replicas": len(urls), "backend": "external",
                 "desktop": {"external": {"endpoints": placeholders}}},
    })  # fmt: skip
    uid = str(obj["metadata"]["uid"])
    for i, url in enumerate(urls):
        _sandbox(cluster, namespace, pool, uid, f"{pool}-{i}", url)
    client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(namespace, client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(
            name="trap", labels={POOL_LABEL: pool, "kubernetes.io/service-name": f"{pool}-0"},
            annotations={URL_ANNOTATION: TRAP}),
        address_type="IPv4",
        endpoints=[client.V1Endpoint(addresses=["192.0.2.10"],
                                     conditions=client.V1EndpointConditions(ready=True))],
        ports=[client.DiscoveryV1EndpointPort(name="episodes", port=8000)],
    ))  # fmt: skip
    return uid


def _sandbox(cluster: Cluster, namespace: str, pool: str, uid: str, name: str, url: str) -> None:
    """One sandbox of an external pool as the operator writes it: its Service and its slice."""
    api = cluster.api_client()
    owner = client.V1OwnerReference(api_version=f"{GROUP}/{VERSION}", kind=SANDBOXPOOL_KIND,
                                    name=pool, uid=uid, controller=True)  # fmt: skip
    labels = {MANAGED_BY_LABEL: OPERATOR_MANAGER, POOL_LABEL: pool, SANDBOX_LABEL: name}
    client.CoreV1Api(api).create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name=name, labels=labels, owner_references=[owner]),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(name="episodes", port=8000)]),
    ))  # fmt: skip
    client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(namespace, client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(
            name=name, labels={POOL_LABEL: pool, "kubernetes.io/service-name": name},
            annotations={URL_ANNOTATION: url}, owner_references=[owner]),
        address_type="IPv4",
        endpoints=[client.V1Endpoint(addresses=["192.0.2.10"],
                                     conditions=client.V1EndpointConditions(ready=True))],
        ports=[client.DiscoveryV1EndpointPort(name="episodes", port=8000)],
    ))  # fmt: skip


@pytest.mark.skipif(not LAUNCHER.exists(), reason="no local sandbox launcher: make sandbox-env")
def test_verify_leases_the_pools_sandbox_and_waits_while_another_holds_it(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    _install_pool_crd(cluster)
    folder = tmp_path / "tasks/files"
    folder.mkdir(parents=True)
    for name in ("create-hello-file.json", "create-hello-file.solutions.json"):
        shutil.copy(TASKS_DIR / "files" / name, folder / name)

    async def run() -> subprocess.CompletedProcess[str]:
        async with local_desktops(1) as (urls, token):
            # a second sandbox that never answers (nothing listens on port 9): it is retired
            # and its episode played on the other, never judged as the task's fault
            _pool(cluster, namespace, "desks", [urls[0], DEAD])
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
    assert len(manifest.sandboxes) == 1  # the dead one retired, the foreign one never taken
    assert "ignored slices the operator did not make for the pool: trap" in done.stdout
    assert manifest.sandboxes[0] != DEAD
    (task,) = manifest.tasks
    assert {e.sandbox for e in task.episodes} == set(manifest.sandboxes)
    assert (task.id, task.verdict, task.reproducible_start) == (
        "create-hello-file",
        "verified",
        True,
    )
    assert task.scores == {"reference": [1.0, 1.0], "noop": [0.0, 0.0], "wrong": [0.0, 0.0]}
    assert time.monotonic() - t0 > HOLD_SECONDS


@pytest.mark.skipif(not LAUNCHER.exists(), reason="no local sandbox launcher: make sandbox-env")
def test_verify_follows_the_pool_a_sandbox_ready_later_plays_one_gone_plays_no_more(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The pool starts with one sandbox, held by another client, so verification waits. Then
    that sandbox leaves the pool (its slice deleted) and another turns ready (a new Service and
    slice): the new one, unknown when verification started, plays every episode, and the first,
    freed once it has left, plays none."""
    _install_pool_crd(cluster)
    folder = tmp_path / "tasks/files"
    folder.mkdir(parents=True)
    for name in ("create-hello-file.json", "create-hello-file.solutions.json"):
        shutil.copy(TASKS_DIR / "files" / name, folder / name)
    disc = client.DiscoveryV1Api(cluster.api_client())

    async def run() -> tuple[subprocess.CompletedProcess[str], str]:
        async with local_desktops(2) as (urls, token):
            first, late = urls
            uid = _pool(cluster, namespace, "desks", [first])
            (tmp_path / "token").write_text(token)
            async with SandboxClient(first, token) as other:
                held = await other.start_episode({"id": "x", "instruction": "x", "config": [],
                                                  "evaluator": {"func": "infeasible"}})  # fmt: skip
                env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
                proc = await asyncio.create_subprocess_exec(
                    str(KUBECUA), "tasks", "verify", str(tmp_path / "tasks"), "--pool", "desks",
                    "--namespace", namespace, "--token-file", str(tmp_path / "token"),
                    env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
                await asyncio.sleep(HOLD_SECONDS)
                assert proc.returncode is None  # waiting for its only sandbox
                disc.delete_namespaced_endpoint_slice("desks-0", namespace)
                _sandbox(cluster, namespace, "desks", uid, "desks-late", late)
                await asyncio.sleep(HOLD_SECONDS)  # the watch sees both long before this
                await other.release(held.episode_id)
            out, err = await asyncio.wait_for(proc.communicate(), 600)
            done = subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())
            return done, late

    done, late = asyncio.run(run())
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = VerifiedManifest.model_validate_json((tmp_path / "tasks/verified.json").read_text())
    assert manifest.sandboxes == [late]
    (task,) = manifest.tasks
    assert [e.sandbox for e in task.episodes] == [late] * 6
    assert (task.verdict, task.reproducible_start) == ("verified", True)


def test_a_pool_that_does_not_exist_is_an_error_that_names_it(
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
    assert f"--pool nobody: SandboxPool {namespace}/nobody: HTTP 404" in done.stderr
