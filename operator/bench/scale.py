"""Benchmark: a pod-backend SandboxPool from 0 to 1000 replicas on kwok, and discovery latency.

Starts its own local control plane (kubecua_testkit.cluster, 12 kwok nodes), installs the CRDs,
runs the operator as a subprocess, and prints one JSON object:
  scale_seconds          0 -> N replicas until status.readyReplicas == N
  api_requests           requests the operator issued (kubecua_operator_api_requests_total;
                         kopf's long-lived watch streams are not counted)
  operator_peak_rss_mib  VmHWM of the operator process
  discovery_p50/p99_ms   from a sandbox pod turning Ready (status written as a kubelet would)
                         until an EndpointSlice watcher like the trainer's sees it ready
Leaves out: episode-server polling (kwok pod IPs answer nothing), real kubelets and images.
Run: make bench-operator   (or: cd operator && .venv/bin/python -m bench.scale --replicas 1000)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kubernetes import client, watch
from tests.conftest import REPO, OperatorProcess, wait_until
from tests.helpers import mark_pod_unready, pool_manifest, set_pod_status

from kubecua_operator.k8s import Kube
from kubecua_testkit.cluster import down, up

NAMESPACE = "bench"


class SliceWatcher:
    """Watches the pool's EndpointSlices as the trainer does; notes when endpoints turn ready."""

    def __init__(self, api: client.ApiClient, pool: str) -> None:
        self.api, self.pool = client.DiscoveryV1Api(api), pool
        self.ready: dict[str, bool] = {}
        self.changed = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        # Raw dicts: the client's model refuses slices whose endpoints are null.
        for event in w.stream(self.api.list_namespaced_endpoint_slice, NAMESPACE,
                              label_selector=f"kubecua.dev/pool={self.pool}",
                              deserialize=False):  # fmt: skip
            obj = event["object"]
            sandbox = (obj["metadata"].get("labels") or {}).get("kubecua.dev/sandbox", "")
            eps = obj.get("endpoints") or []
            with self.changed:
                ready = (eps[0].get("conditions") or {}).get("ready") if eps else False
                self.ready[sandbox] = bool(eps) and ready is not False
                self.changed.notify_all()
            if self.stop:
                w.stop()

    def wait(self, sandbox: str, ready: bool, timeout: float = 30) -> float:
        with self.changed:
            ok = self.changed.wait_for(lambda: self.ready.get(sandbox) is ready, timeout)
        if not ok:
            raise TimeoutError(f"{sandbox} never became ready={ready} for the watcher")
        return time.perf_counter()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure_scale(kube: Kube, op: OperatorProcess, replicas: int) -> dict:
    before = op.metric("kubecua_operator_api_requests_total")
    started = time.perf_counter()
    kube.create(pool_manifest("fleet", NAMESPACE, replicas))

    def all_ready() -> bool:
        st = (kube.get("SandboxPool", NAMESPACE, "fleet") or {}).get("status") or {}
        return st.get("readyReplicas") == replicas

    wait_until(all_ready, 600, f"{replicas} ready sandboxes")
    elapsed = time.perf_counter() - started
    assert op.proc is not None
    return {
        "replicas": replicas,
        "scale_seconds": round(elapsed, 2),
        "api_requests": int(op.metric("kubecua_operator_api_requests_total") - before),
        "operator_peak_rss_mib": round(peak_rss_mib(op.proc.pid), 1),
    }


def measure_discovery(kube: Kube, api: client.ApiClient, samples: int) -> dict:
    watcher = SliceWatcher(api, "fleet")
    latencies = []
    for i in range(samples):
        name = f"fleet-{i}"
        pod = kube.get("Pod", NAMESPACE, name) or {}
        mark_pod_unready(kube, NAMESPACE, name)
        watcher.wait(name, False)
        conds = [{**c, "status": "True"} if c["type"] in ("Ready", "ContainersReady") else c
                 for c in pod["status"]["conditions"]]  # fmt: skip
        t0 = time.perf_counter()
        set_pod_status(kube, NAMESPACE, name, {"conditions": conds})
        latencies.append((watcher.wait(name, True) - t0) * 1000)
    watcher.stop = True
    q = statistics.quantiles(latencies, n=100)
    return {"discovery_samples": samples, "discovery_p50_ms": round(q[49], 1),
            "discovery_p99_ms": round(q[98], 1)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    name = f"kubecua-bench-{os.getpid()}"
    cluster = up(name, nodes=max(3, args.replicas // 100 + 2))
    try:
        cluster.kubectl("apply", "-f", str(REPO / "crds"))
        cluster.kubectl("wait", "--for=condition=Established", "crd/sandboxpools.kubecua.dev")
        cluster.kubectl("create", "namespace", NAMESPACE)
        api = cluster.api_client()
        api.configuration.connection_pool_maxsize = 8
        kube = Kube(api)
        log = Path(tempfile.mkdtemp()) / "operator.log"
        env = {"KUBECUA_OPERATOR_POLL_EPISODES": "false", "KUBECUA_OPERATOR_CREATE_BURST": "64"}
        op = OperatorProcess(Path(cluster.kubeconfig), log, env)
        op.start()
        try:
            result = measure_scale(kube, op, args.replicas)
            print(json.dumps(result), file=sys.stderr, flush=True)  # kept if discovery fails
            result |= measure_discovery(kube, api, args.samples)
        finally:
            op.stop()
        result["machine"] = f"{os.cpu_count()} cores"
        print(json.dumps(result))
    finally:
        down(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
