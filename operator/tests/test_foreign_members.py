"""Issue 42, item 2, on the real API server: discovery that only the operator can join.

The attack: a user who may create only Pods and Services labels her own Service
kubecua.dev/pool=<pool>, selecting her own pod. The EndpointSlice controller copies the label onto
its slice, so the trainer's label selector lists her pod. The trainer's source (run here as the
trainer runs it, in the trainer's environment) never publishes her pod's URL, so no episode and no
bearer token ever goes there; the pool names her Service in its Degraded condition (reason
ForeignMembers) and a Warning Event, and clears it once the Service is gone.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubecua_testkit.tools import REPO

from .conftest import wait_until
from .helpers import condition, pool_manifest, pool_status, sandbox_pods, wait_pool

TRAINER_PY = REPO / "trainer" / ".venv" / "bin" / "python"
# The trainer's own discovery, printing what it publishes and what it ignored, as JSON lines.
WATCH = """
import asyncio, json, sys
from kubecua_trainer.sources.kube import PoolSource

source = PoolSource(sys.argv[1], sys.argv[2], token=None, pool_uid=sys.argv[3])

class Printer:  # stands in for SandboxLeases: prints every ready set the source publishes
    def set_ready(self, urls):
        print(json.dumps({"ready": sorted(urls), "foreign": source.foreign}), flush=True)

async def main():
    await source.start(Printer())
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture
def trainer_source(cluster: Any) -> Iterator[Any]:
    """Start the trainer's PoolSource for (pool, namespace, uid); yields a queue of its lines."""
    if not TRAINER_PY.exists():
        pytest.skip(
            "the trainer's environment is not built (make trainer-env); its source runs there"
        )
    procs: list[subprocess.Popen[str]] = []

    def start(pool: str, namespace: str, uid: str) -> queue.Queue[dict]:
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        proc = subprocess.Popen(
            [str(TRAINER_PY), "-c", WATCH, pool, namespace, uid],
            stdout=subprocess.PIPE, text=True, env=env, cwd=REPO / "trainer",
        )  # fmt: skip
        procs.append(proc)
        lines: queue.Queue[dict] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(json.loads(line))

        threading.Thread(target=pump, daemon=True).start()
        return lines

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def test_a_service_labelled_for_a_pool_is_named_and_never_discovered(
    kube, operator, namespace, trainer_source
):
    kube.create(pool_manifest("desks", namespace, 2))
    wait_pool(kube, namespace, "desks", ready=2, total=2)
    uid = kube.get("SandboxPool", namespace, "desks")["metadata"]["uid"]
    own = {f"http://{p['status']['podIP']}:8000" for p in sandbox_pods(kube, namespace, "desks")}

    # Her pod (a kwok node runs it: Running, Ready, an IP) and her Service, labelled for the pool.
    meta = {"namespace": namespace, "labels": {"app": "mine"}}
    container = {"name": "c", "image": "example.com/listener"}
    kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine", **meta},
                 "spec": {"containers": [container]}})  # fmt: skip
    kube.create({"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "join", "namespace": namespace,
                              "labels": {"kubecua.dev/pool": "desks"}},
                 "spec": {"selector": {"app": "mine"},
                          "ports": [{"name": "episodes", "port": 8000}]}})  # fmt: skip
    ip = wait_until(
        lambda: ((kube.get("Pod", namespace, "mine") or {}).get("status") or {}).get("podIP"),
        60, "her pod's IP",
    )  # fmt: skip
    theirs = f"http://{ip}:8000"

    def her_slice() -> bool:  # the trainer's selector lists her pod: the attack is real
        slices = kube.list("EndpointSlice", namespace, "kubecua.dev/pool=desks")
        endpoints = [e for s in slices for e in s.get("endpoints") or []]
        return any(ip in e["addresses"] for e in endpoints)

    wait_until(her_slice, 60, "her pod in a slice labelled for the pool")

    lines = trainer_source("desks", namespace, uid)
    seen: list[dict] = []

    def published_own_and_judged_hers() -> bool:
        while not lines.empty():
            seen.append(lines.get())
        last = seen[-1] if seen else {}
        return set(last.get("ready", [])) == own and "join" in str(last.get("foreign"))

    wait_until(published_own_and_judged_hers, 60, "the source to publish the pool's 2 sandboxes")
    assert all(theirs not in line["ready"] for line in seen)
    assert any(
        "not marked app.kubernetes.io/managed-by=kubecua-operator" in why
        for why in seen[-1]["foreign"].values()
    )

    def degraded() -> dict:
        cond = condition(pool_status(kube, namespace, "desks"), "Degraded")
        return cond if cond.get("reason") == "ForeignMembers" else {}

    cond = wait_until(degraded, 60, "Degraded=True, ForeignMembers")
    assert cond["status"] == "True"
    assert "did not make: join;" in cond["message"]
    events = [
        e for e in kube.list("Event", namespace)
        if e["involvedObject"]["name"] == "desks" and e["reason"] == "ForeignMembers"
    ]  # fmt: skip
    assert events
    assert {e["type"] for e in events} == {"Warning"}
    assert "join" in events[0]["message"]
    assert pool_status(kube, namespace, "desks")["readyReplicas"] == 2  # it still serves

    kube.delete("Service", namespace, "join")
    wait_until(lambda: condition(pool_status(kube, namespace, "desks"), "Degraded")
               .get("status") == "False", 60, "Degraded to clear")  # fmt: skip
