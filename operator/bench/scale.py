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
Smoke: make bench-operator BENCH_ARGS=--smoke   (20 sandboxes, 10 samples: checks it runs)
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

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException
from tests.conftest import REPO, OperatorProcess, wait_until
from tests.helpers import mark_pod_unready, pool_manifest, set_pod_status

from kubecua_operator.k8s import Kube
from kubecua_testkit.cluster import down, up

NAMESPACE = "bench"


class SliceWatcher:
    """Watches the pool's EndpointSlices as the trainer does; notes when endpoints turn ready.

    A watch stream can break at any time (under load: "Response ended prematurely"); the
    watcher then resumes from the last resourceVersion it saw, and lists again when that one is
    too old (410 Gone), so it keeps watching until stopped. Raw dicts throughout: the client's
    model refuses slices whose endpoints are null."""

    def __init__(self, api: client.ApiClient, namespace: str, pool: str) -> None:
        self.api, self.namespace = client.DiscoveryV1Api(api), namespace
        self.selector = f"kubecua.dev/pool={pool}"
        self.ready: dict[str, bool] = {}
        self.changed = threading.Condition()
        self.stop = False
        self.reconnects = self.relists = 0
        self.error: Exception | None = None  # the last one, for a timeout's message
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        version, pause = "", 0.1
        while not self.stop:
            try:
                if not version:
                    version = self._list()
                version = self._watch(version)
                pause = 0.1
            except ApiException as err:
                self.error = err
                if err.status == 410:  # too old to resume from: list again
                    version = ""
                    continue
                self.reconnects += 1
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as err:  # a broken stream
                self.error = err
                self.reconnects += 1
            time.sleep(pause)  # a short, growing pause between failed attempts, not a wait
            pause = min(pause * 2, 2.0)

    def _note(self, obj: dict, deleted: bool = False) -> None:
        sandbox = (obj["metadata"].get("labels") or {}).get("kubecua.dev/sandbox", "")
        eps = obj.get("endpoints") or []
        ready = (eps[0].get("conditions") or {}).get("ready") if eps else False
        with self.changed:
            self.ready[sandbox] = not deleted and bool(eps) and ready is not False
            self.changed.notify_all()

    def _list(self) -> str:
        self.relists += 1
        resp = self.api.list_namespaced_endpoint_slice(
            self.namespace, label_selector=self.selector, _preload_content=False,
            _request_timeout=30,
        )  # fmt: skip
        body = json.loads(resp.data)
        for obj in body.get("items") or []:
            self._note(obj)
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        """One watch request from `version`; returns the last version seen ("" after 410)."""
        resp = self.api.list_namespaced_endpoint_slice(
            self.namespace, label_selector=self.selector, watch=True,
            resource_version=version, allow_watch_bookmarks=True, timeout_seconds=60,
            _preload_content=False, _request_timeout=(10, 90),
        )  # fmt: skip
        try:
            for line in resp:  # one JSON event per line
                if self.stop:
                    break
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        return ""
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = obj["metadata"].get("resourceVersion") or version
                if event["type"] != "BOOKMARK":
                    self._note(obj, deleted=event["type"] == "DELETED")
        finally:
            resp.release_conn()
        return version

    def wait(self, sandbox: str, ready: bool, timeout: float = 30) -> float:
        with self.changed:
            ok = self.changed.wait_for(lambda: self.ready.get(sandbox) is ready, timeout)
        if not ok:
            raise TimeoutError(
                f"{sandbox} never became ready={ready} for the watcher (reconnects: "
                f"{self.reconnects}, lists: {self.relists}, last error: {self.error!r})"
            )
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
    watcher = SliceWatcher(api, NAMESPACE, "fleet")
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
            "discovery_p99_ms": round(q[98], 1),
            "watch_reconnects": watcher.reconnects, "watch_lists": watcher.relists}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument(
        "--smoke", action="store_true", help="20 sandboxes and 10 discovery samples (a check)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.replicas, args.samples = 20, 10
    if args.replicas < 1 or not 2 <= args.samples <= args.replicas:
        parser.error("--replicas must be >= 1 and --samples between 2 and --replicas")
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
