"""A real local Kubernetes control plane on loopback, for tests and `make cluster-up`.

kwokctl (runtime `binary`) runs etcd, kube-apiserver (TLS, service-account keys, RBAC, admission),
kube-controller-manager, kube-scheduler and the kwok controller as local processes, from the
binaries hack/build-control-plane.sh builds from the Go module proxy; kwokctl downloads nothing
when every binary is given. kwok nodes stand in for kubelets: pods scheduled onto them become
Running and Ready with an IP, but no container really runs.

With `real_node=True` (`make cluster-up REAL_NODE=1`) a real node joins beside them
(kubecua_testkit.node: containerd, kubelet, kube-proxy), and the kwok nodes get the taint
kubecua.dev/kwok=true:NoSchedule, so pods land on the real node unless they tolerate kwok.

Usage:
    python -m kubecua_testkit.cluster up [--name kubecua] [--nodes 3] [--real-node]
    python -m kubecua_testkit.cluster down [--name kubecua]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from kubecua_testkit import node as real
from kubecua_testkit.tools import REPO, binary, cache_dir, run

COMPONENTS = {
    "--etcd-binary": "etcd",
    "--kube-apiserver-binary": "kube-apiserver",
    "--kube-controller-manager-binary": "kube-controller-manager",
    "--kube-scheduler-binary": "kube-scheduler",
    "--kwok-controller-binary": "kwok",
}


def workdir() -> Path:
    """kwokctl keeps each cluster's PKI, configs, logs and pids here, outside the clone."""
    return Path(os.environ.get("KWOK_WORKDIR", cache_dir() / "kwok"))


@dataclass
class Cluster:
    name: str
    kubeconfig: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ):
        return run(
            [binary("kubectl"), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            check=check,
            timeout=timeout,
        )

    def helm(self, *args: str, check: bool = True):
        return run([binary("helm"), "--kubeconfig", self.kubeconfig, *args], check=check)

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))


KWOKCTL_CONFIG = REPO / "hack" / "kwokctl.yaml"
KWOK_TAINT = "kubecua.dev/kwok=true:NoSchedule"


def _kwokctl(*args: str | os.PathLike[str], timeout: float = 180, conf: Path = KWOKCTL_CONFIG):
    locked = args[0] in ("create", "delete")
    with _one_kwokctl_at_a_time() if locked else contextlib.nullcontext():
        return run(
            [binary("kwokctl"), "--config", conf, *args],
            env={"KWOK_WORKDIR": str(workdir())},
            timeout=timeout,
        )


@contextlib.contextmanager
def _one_kwokctl_at_a_time() -> Iterator[None]:
    """Hold a lock file in the kwok work directory while a cluster is created or deleted.

    kwokctl gives a new cluster the first free ports counting down from 32767 and binds them
    only when its components start, and it rewrites the shared contexts.yaml: two suites
    creating clusters at once (make test runs two lanes, hack/run-suites.sh) could pick the same
    ports. `create --wait` returns once they are bound, so the next creation sees them taken."""
    workdir().mkdir(parents=True, exist_ok=True)
    with open(workdir() / ".kwokctl.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cluster_dir(name: str) -> Path:
    return workdir() / "clusters" / name


def kubeconfig_path(name: str) -> Path:
    return cluster_dir(name) / "kubeconfig.yaml"


def up(name: str = "kubecua", nodes: int = 3, real_node: bool = False) -> Cluster:
    """Create (or reuse) cluster `name` with `nodes` Ready kwok nodes, and with `real_node` a
    real node beside them; idempotent."""
    path = kubeconfig_path(name)
    if not (path.exists() and _healthy(path)):
        if path.exists():  # a stale cluster from a killed run: clear it first
            down(name)
        conf = KWOKCTL_CONFIG
        if real_node:  # the API server must be reachable from pods: see node.kwokctl_config
            conf = workdir() / f"kwokctl-{name}.yaml"
            conf.parent.mkdir(parents=True, exist_ok=True)
            front_proxy = real.front_proxy_pki(cluster_dir(name) / "front-proxy")
            conf.write_text(
                real.kwokctl_config(real.node_ip(), cluster_dir(name) / "pki", front_proxy)
            )
        flags = [arg for flag, tool in COMPONENTS.items() for arg in (flag, str(binary(tool)))]
        _kwokctl(
            "create", "cluster", "--name", name, "--runtime", "binary",
            "--kube-authorization", "--kube-admission", "--wait", "120s", *flags,
            # kwokctl would otherwise merge a context into ~/.kube/config
            "--kubeconfig", str(workdir() / "contexts.yaml"),
            conf=conf,
        )  # fmt: skip
    cluster = Cluster(name=name, kubeconfig=path)
    _kwokctl("scale", "node", "--name", name, "--replicas", str(nodes))
    wait_nodes_ready(cluster, nodes)
    if real_node:
        kwok = [n for n in _node_names(cluster) if n != real.NAME]
        if kwok:
            cluster.kubectl("taint", "nodes", *kwok, KWOK_TAINT, "--overwrite")
        node_for(cluster).start(images=local_images())
    return cluster


def node_for(cluster: Cluster) -> real.RealNode:
    return real.RealNode(cluster.name, cluster.kubeconfig, cluster_dir(cluster.name) / "pki")


# The images pods run (the chart's and the examples'), of those `make images` built into podman.
# Not every localhost/kubecua image: a build intermediate (a VM's rootfs, 4.6 GB) imported too
# filled this machine's disk and put the node under DiskPressure.
NODE_IMAGES = ("operator", "sandbox", "trainer")


def local_images() -> list[str]:
    """kubecua's images that `make images` built into podman and that the node runs."""
    out = run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout.split()
    wanted = {f"localhost/kubecua/{name}:" for name in NODE_IMAGES}
    return sorted(ref for ref in out if any(ref.startswith(w) for w in wanted))


def _node_names(cluster: Cluster) -> list[str]:
    return [n.metadata.name for n in client.CoreV1Api(cluster.api_client()).list_node().items]


def down(name: str = "kubecua") -> None:
    owner = real.RUN_DIR / "cluster"
    if owner.exists() and owner.read_text().strip() == name:
        real.RealNode(name, kubeconfig_path(name), cluster_dir(name) / "pki").stop()
    _kwokctl("delete", "cluster", "--name", name)


def _healthy(kubeconfig: Path) -> bool:
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        client.VersionApi(api).get_code(_request_timeout=3)
        return True
    except Exception:  # any failure means "not usable": recreate it
        return False


def wait_nodes_ready(cluster: Cluster, count: int, timeout: float = 60) -> None:
    """Block until `count` nodes report Ready (kwok fakes their heartbeats)."""
    core = client.CoreV1Api(cluster.api_client())
    deadline = time.monotonic() + timeout
    while True:
        ready = [
            n.metadata.name
            for n in core.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        ]
        if len(ready) >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(ready)} of {count} kwok nodes became Ready")
        time.sleep(0.2)  # polling the API is the condition check; kwok has no event to wait on


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubecua_testkit.cluster")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--name", default=os.environ.get("KUBECUA_CLUSTER", "kubecua"))
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument(
        "--real-node", action="store_true", help="join a real node (containerd, kubelet)"
    )
    args = parser.parse_args(argv)
    if args.action == "down":
        down(args.name)
        return 0
    started = time.monotonic()
    cluster = up(args.name, args.nodes, real_node=args.real_node)
    print(f"cluster {args.name} ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    print(f"export KUBECONFIG={cluster.kubeconfig}", file=sys.stderr)
    print(cluster.kubeconfig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
