"""Verification's leasing side at scale: `make bench-tasks-leasing` (BENCH_ARGS="--sandboxes 20"
for a smoke run). Not a timed test: it prints one JSON document.

A SandboxPool of N sandboxes (1,000) as the operator leaves a pod pool: on a local control plane
with kwok nodes (kubecua_testkit.cluster; or --kubeconfig), the pool object, and per sandbox a
headless Service the operator would make (its mark, labels, controller reference to the pool)
with an EndpointSlice it controls naming one ready address (10.x.y.z:8000). The operator does
not run: the objects are written directly, as discovery reads them. Then:

1. discovery: pool.PoolWatch (what `kubecua tasks verify --pool` runs) from start to its first
   set of N URLs, judged by api/kubecua_api/discovery.py's rule;
2. leasing: `late` of the sandboxes are marked not ready, verification starts on the others
   (a fresh PoolWatch, followed as --pool does), and once the first episode is released the
   late ones are marked ready again: they must get episodes too;
3. verify() plays T tasks (reference, no-op and wrong, `repeats` times: 6 episodes a task,
   T = N by default: about 6 per sandbox) against them, each URL through one in-process
   stand-in server (episode_standin.py: kwok nodes run no containers, so nothing answers at the
   slices' addresses; why one server, there).

Figures: discovery seconds; leases/s and episodes/s over verify()'s wall time; episodes per
sandbox (min, max, max/min: fairness), over all and over those ready from the start; sandboxes
used of N; double leases (a start on a sandbox already leased: must be 0); the late sandboxes'
watch latency; peak RSS of this one process (the engine, the stand-in server and the kubernetes
client together). Every verdict must be `verified`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubecua_tasks.pool import PoolWatch, Sandboxes
from kubecua_tasks.verify import verify
from kubernetes import client

from kubecua_api.constants import (
    GROUP,
    MANAGED_BY_LABEL,
    OPERATOR_MANAGER,
    POOL_LABEL,
    SANDBOX_LABEL,
    SANDBOXPOOL_KIND,
    SANDBOXPOOL_PLURAL,
    VERSION,
)
from kubecua_sandbox_client import SandboxClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from episode_standin import StandIn

REPO = Path(__file__).resolve().parents[3]
POOL_CRD = REPO / "crds/kubecua.dev_sandboxpools.yaml"
POOL = "fleet"


def rss_mib(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def address(i: int) -> str:
    return f"10.{64 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


@contextlib.contextmanager
def control_plane(kubeconfig: str | None) -> Iterator[Path]:
    """The given cluster, or a local control plane with 3 kwok nodes made (and deleted) here."""
    if kubeconfig:
        yield Path(kubeconfig)
        return
    from kubecua_testkit.cluster import down, up

    name = f"kubecua-bench-leasing-{os.getpid()}"
    try:
        yield up(name, nodes=3).kubeconfig
    finally:
        down(name)


def install_crd(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    body = yaml.safe_load(POOL_CRD.read_text())
    with contextlib.suppress(client.ApiException):  # 409: already installed
        ext.create_custom_resource_definition(body)
    for _ in range(300):
        conds = ext.read_custom_resource_definition(body["metadata"]["name"]).status.conditions
        if any(c.type == "Established" and c.status == "True" for c in conds or []):
            return
        time.sleep(0.2)  # polling is the condition check: the API has no event to wait on here
    raise TimeoutError("the SandboxPool CRD was never Established")


def endpoints(i: int, ready: bool) -> list[client.V1Endpoint]:
    return [
        client.V1Endpoint(
            addresses=[address(i)], conditions=client.V1EndpointConditions(ready=ready)
        )
    ]


def make_pool(api: client.ApiClient, namespace: str, n: int) -> list[str]:
    """The pool object and its N sandboxes' Services and slices; returns the slices' names."""
    custom = client.CustomObjectsApi(api)
    obj = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SANDBOXPOOL_PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": SANDBOXPOOL_KIND,
        "metadata": {"name": POOL}, "spec": {"replicas": n},
    })  # fmt: skip
    owner = client.V1OwnerReference(
        api_version=f"{GROUP}/{VERSION}", kind=SANDBOXPOOL_KIND, name=POOL,
        uid=obj["metadata"]["uid"], controller=True,
    )  # fmt: skip
    core, disc = client.CoreV1Api(api), client.DiscoveryV1Api(api)

    def one(i: int) -> str:
        name = f"{POOL}-{i:04d}"
        labels = {MANAGED_BY_LABEL: OPERATOR_MANAGER, POOL_LABEL: POOL, SANDBOX_LABEL: name}
        svc = core.create_namespaced_service(namespace, client.V1Service(
            metadata=client.V1ObjectMeta(name=name, labels=labels, owner_references=[owner]),
            spec=client.V1ServiceSpec(cluster_ip="None", ports=[
                client.V1ServicePort(name="episodes", port=8000)]),
        ))  # fmt: skip
        svc_ref = client.V1OwnerReference(
            api_version="v1", kind="Service", name=name, uid=svc.metadata.uid, controller=True
        )
        disc.create_namespaced_endpoint_slice(namespace, client.V1EndpointSlice(
            metadata=client.V1ObjectMeta(
                name=f"{name}-x", owner_references=[svc_ref],
                labels={POOL_LABEL: POOL, SANDBOX_LABEL: name,
                        "kubernetes.io/service-name": name}),
            address_type="IPv4", endpoints=endpoints(i, True),
            ports=[client.DiscoveryV1EndpointPort(name="episodes", port=8000)],
        ))  # fmt: skip
        return f"{name}-x"

    with ThreadPoolExecutor(16) as threads:
        return list(threads.map(one, range(n)))


def mark(api: client.ApiClient, namespace: str, slices: list[str], ready: bool) -> None:
    disc = client.DiscoveryV1Api(api)

    def one(name: str) -> None:
        i = int(name.split("-")[1])
        body = {"endpoints": [{"addresses": [address(i)], "conditions": {"ready": ready}}]}
        disc.patch_namespaced_endpoint_slice(name, namespace, body)

    with ThreadPoolExecutor(16) as threads:
        list(threads.map(one, slices))


def write_tasks(folder: Path, count: int) -> None:
    """`count` tasks the stand-in scores: the reference's step 'ok' passes, nothing else."""
    for k in range(count):
        tid = f"lease-{k:05d}"
        task = {"id": tid, "instruction": "stand-in", "config": [],
                "evaluator": {"func": "standin"}}  # fmt: skip
        sols = {"reference": [{"action": "ok"}], "wrong": [{"action": "no"}]}
        (folder / f"{tid}.json").write_text(json.dumps(task))
        (folder / f"{tid}.solutions.json").write_text(json.dumps(sols))


def spread(counts: list[int]) -> dict[str, Any]:
    if not counts:
        return {"sandboxes": 0}
    low, high = min(counts), max(counts)
    return {"sandboxes": len(counts), "min": low, "max": high,
            "max_over_min": round(high / low, 2) if low else None,
            "mean": round(statistics.mean(counts), 2)}  # fmt: skip


async def measure(api: client.ApiClient, namespace: str, args: argparse.Namespace) -> dict:
    n, late_n = args.sandboxes, args.late
    t0 = time.monotonic()
    slices = await asyncio.to_thread(make_pool, api, namespace, n)
    setup_seconds = time.monotonic() - t0

    # 1. discovery of all N, as `kubecua tasks verify --pool` starts
    t0 = time.monotonic()
    async with PoolWatch(POOL, namespace, api) as watch:
        discovery_seconds = time.monotonic() - t0
        discovered = len(watch.sandboxes.urls)
        foreign = len(watch.foreign)
    late = slices[-late_n:] if late_n else []
    await asyncio.to_thread(mark, api, namespace, late, False)

    # 2-3. verification on the pool, followed; the late ones turn ready after the first episode
    token = uuid.uuid4().hex
    standin = StandIn(token, delay=args.delay_ms / 1000)
    base = await standin.start()

    def connect(url: str, tok: str | None) -> SandboxClient:
        host = url.split("//", 1)[1].split(":", 1)[0]
        return SandboxClient(f"{base}/s/{host}", tok, timeout=120)

    late_hosts = {address(int(s.split("-")[1])) for s in late}
    late_seen: list[float] = []

    async def turn_late_ready(sandboxes: Sandboxes) -> None:
        await standin.first_release.wait()
        t = time.monotonic()
        await asyncio.to_thread(mark, api, namespace, late, True)
        while not {f"http://{h}:8000" for h in late_hosts} <= sandboxes.urls:
            await sandboxes.changed()
        late_seen.append(time.monotonic() - t)

    folder = Path(tempfile.mkdtemp(prefix="kubecua-bench-leasing-"))
    write_tasks(folder, args.tasks or n)
    rss_before = rss_mib()
    async with PoolWatch(POOL, namespace, api) as watch:
        at_start = set(watch.sandboxes.urls)
        follower = asyncio.create_task(turn_late_ready(watch.sandboxes)) if late else None
        t0 = time.monotonic()
        manifest = await verify(folder, watch.sandboxes, token, args.repeats, connect=connect)
        seconds = time.monotonic() - t0
        if follower is not None:
            await asyncio.wait_for(follower, 5)
    await standin.stop()
    peak_rss = rss_mib("VmHWM")

    per = Counter(e.sandbox for t in manifest.tasks for e in t.episodes)
    episodes = sum(per.values())
    all_urls = {f"http://{address(i)}:8000" for i in range(n)}
    verdicts = Counter(t.verdict for t in manifest.tasks)
    holds = sorted(standin.hold_seconds)
    # the steady rate: the middle 80% of releases, leaving out the start (1,000 clients made,
    # each loading the CA bundle: see docs/benchmarks.md) and the tail of the queue
    rel = standin.released_at
    lo, hi = rel[len(rel) // 10], rel[len(rel) * 9 // 10]
    steady = round((len(rel) * 9 // 10 - len(rel) // 10) / (hi - lo), 1) if hi > lo else None
    return {
        "sandboxes": n,
        "tasks": len(manifest.tasks),
        "repeats": args.repeats,
        "stand_in_delay_ms": args.delay_ms,
        "setup_seconds": round(setup_seconds, 1),
        "discovery": {
            "seconds": round(discovery_seconds, 3),
            "urls": discovered,
            "foreign_slices": foreign,
        },
        "ready_at_start": len(at_start),
        "late": {
            "sandboxes": late_n,
            "seen_ready_seconds": round(late_seen[0], 3) if late_seen else None,
            "episodes": spread([per[u] for u in all_urls - at_start]),
        },
        "verify_seconds": round(seconds, 2),
        "episodes": episodes,
        "leases": sum(standin.leases.values()),
        "leases_per_second": round(sum(standin.leases.values()) / seconds, 1),
        "episodes_per_second": round(episodes / seconds, 1),
        "episodes_per_second_steady": steady,
        "first_lease_after_seconds": round((standin.first_lease_at or t0) - t0, 2),
        "http_requests": standin.requests,
        "lease_hold_ms_p50": round(1000 * holds[len(holds) // 2], 1) if holds else None,
        "lease_hold_ms_p99": round(1000 * holds[int(len(holds) * 0.99)], 1) if holds else None,
        "episodes_per_sandbox": spread([per[u] for u in all_urls]),
        "episodes_per_sandbox_ready_at_start": spread([per[u] for u in at_start]),
        "sandboxes_used": sum(1 for u in all_urls if per[u]),
        "every_sandbox_used": all(per[u] for u in all_urls),
        "unknown_sandboxes": sorted(set(per) - all_urls),
        "double_leases": standin.double_leases,
        "still_held": len(standin.held),
        "verdicts": dict(verdicts),
        "all_verified": verdicts == Counter({"verified": len(manifest.tasks)}),
        "rss_mib_before_verify": rss_before,
        "peak_rss_mib": peak_rss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=0, help="tasks (6 episodes each); 0: N")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--late", type=int, default=-1, help="sandboxes ready late; -1: N/10")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="each stand-in call's delay")
    parser.add_argument("--kubeconfig", help="an existing cluster (else one is made and deleted)")
    parser.add_argument("--namespace", help="an existing namespace (else one is made)")
    args = parser.parse_args(argv)
    if args.late < 0:
        args.late = args.sandboxes // 10
    started = time.monotonic()
    with control_plane(args.kubeconfig) as kubeconfig:
        from kubernetes import config

        conf = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=conf)
        conf.connection_pool_maxsize = 32  # the setup's 16 threads, and the watch beside them
        api = client.ApiClient(conf)
        install_crd(api)
        namespace = args.namespace or f"bench-leasing-{uuid.uuid4().hex[:6]}"
        core = client.CoreV1Api(api)
        if not args.namespace:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        try:
            result = asyncio.run(measure(api, namespace, args))
        finally:
            if not args.namespace:
                core.delete_namespace(namespace, propagation_policy="Background")
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))
    ok = (result["every_sandbox_used"] and result["double_leases"] == 0
          and result["all_verified"] and not result["unknown_sandboxes"])  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
