"""Kueue's real controller as a local process against a test cluster's API server.

hack/build-cluster-addons.sh builds `kueue` at KUEUE_VERSION (hack/versions.env); its CRDs come
from the same module in the Go module cache. What differs from an in-cluster install
(docs/cluster-integrations.md):
- Webhooks: the manager serves them on 127.0.0.1 with a self-signed certificate made here, and
  the API server (also on loopback) calls them through `url:` webhook configurations carrying
  that CA, for the Job and Kueue kinds only (the only integration enabled is batch/job).
- The CRDs are installed without their conversion webhooks: everything here speaks v1beta2,
  the storage version, so nothing is converted.
- Kueue reads its metrics certificate from a fixed path under /etc; it runs in a private mount
  namespace where an overlay puts the self-signed one there, so the host's /etc is untouched.
- No leader election (one replica), and no visibility API server (an aggregated API needing a
  Service in the cluster).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from kubecua_testkit.cluster import Cluster
from kubecua_testkit.tools import REPO, binary, run

NAMESPACE = "kueue-system"  # Kueue's own namespace: its jobs are never managed there
FLAVOR = "default-flavor"


def versions() -> dict[str, str]:
    """hack/versions.env's KEY=value lines."""
    lines = (REPO / "hack" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def module_dir(module: str, version_key: str) -> Path:
    """A module's source in the Go module cache (hack/build-cluster-addons.sh downloads it)."""
    cache = os.environ.get("GOMODCACHE") or str(Path.home() / "go" / "pkg" / "mod")
    path = Path(cache) / f"{module}@{versions()[version_key]}"
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is missing: run `make setup-addons`")
    return path


def wait_established(cluster: Cluster, crds: list[str], timeout: float = 60) -> None:
    """Until every CRD is Established. (`kubectl wait` fails at once on a CRD just created,
    whose status has no conditions yet.)"""
    query = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + timeout
    for crd in crds:
        # check=False: the jsonpath errors while the status has no conditions at all
        while (
            cluster.kubectl("get", "crd", crd, "-o", f"jsonpath={query}", check=False).stdout
            != "True"
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd} not Established after {timeout}s")
            time.sleep(0.3)  # the API server compiles large schemas for a while


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(directory: Path) -> bytes:
    """tls.crt and tls.key for 127.0.0.1 in `directory`; returns the certificate (its own CA)."""
    directory.mkdir(parents=True, exist_ok=True)
    run([
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=kueue-webhook", "-addext", "subjectAltName=IP:127.0.0.1",
        "-keyout", directory / "tls.key", "-out", directory / "tls.crt",
    ])  # fmt: skip
    return (directory / "tls.crt").read_bytes()


def webhook_configurations(kueue: Path, port: int, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's own webhook manifests, kept to the Job and Kueue kinds, pointed at the local
    manager by URL with our CA."""
    import base64

    manifests = kueue / "config" / "components" / "webhook" / "manifests.yaml"
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc or doc.get("kind") not in (
            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
        ):  # fmt: skip
            continue
        hooks = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if "batch-v1-job" not in path and "kueue-x-k8s-io" not in path:
                continue
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
            hooks.append(hook)
        doc["metadata"] = {
            "name": f"kubecua-test-kueue-{doc['kind'][: -len('WebhookConfiguration')].lower()}"
        }
        doc["webhooks"] = hooks
        out.append(doc)
    return out


class Kueue:
    """`start()` installs the CRDs and runs the manager until Ready; `stop()` ends it and
    removes the webhook configurations (the cluster outlives it)."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        self.source = module_dir("sigs.k8s.io/kueue", "KUEUE_VERSION")
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = 0
        self.hooks: list[dict[str, Any]] = []

    @property
    def log_path(self) -> Path:
        return self.workdir / "kueue.log"

    def install_crds(self) -> None:
        bases = self.source / "config" / "components" / "crd" / "bases"
        # server-side: the Workload CRD is larger than client-side apply's annotation limit
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(bases))
        wait_established(self.cluster, [
            "workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io",
            "localqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io",
        ])  # fmt: skip

    def config(self, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job"]},
        }

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.install_crds()
        self.cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        certs = self.workdir / "certs"
        ca = self_signed(certs)
        # the overlay's upper layer: /etc/kueue/metrics/certs inside the mount namespace only
        upper, work = self.workdir / "etc-upper", self.workdir / "etc-work"
        metrics = upper / "kueue" / "metrics" / "certs"
        metrics.mkdir(parents=True, exist_ok=True)
        work.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            (metrics / name).write_bytes((certs / name).read_bytes())
        self.health_port, webhook_port = free_port(), free_port()
        conf = self.workdir / "config.yaml"
        conf.write_text(yaml.safe_dump(self.config(webhook_port, certs)))
        script = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
            f' && exec "$0" "$@"'
        )
        args = [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script,
            str(binary("kueue")), f"--config={conf}", f"--kubeconfig={self.cluster.kubeconfig}",
            "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        self.hooks = webhook_configurations(self.source, webhook_port, ca)
        for hook in self.hooks:
            self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(hook))

    def _wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"kueue exited {self.proc.returncode}: see {self.log_path}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                if httpx.get(url, timeout=1).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)  # its readiness endpoint is the only signal
        raise TimeoutError(f"kueue not ready after {timeout}s: see {self.log_path}")

    def stop(self) -> None:
        for hook in self.hooks:
            kind = hook["kind"].lower()
            self.cluster.kubectl("delete", kind, hook["metadata"]["name"], check=False)
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None

    def apply_queues(
        self, cluster_queue: str, namespace: str, local_queue: str, quota: dict[str, str]
    ) -> None:
        """A ResourceFlavor, a ClusterQueue with `quota` (resource -> nominal quota) open to
        every namespace, and a LocalQueue in `namespace` pointing at it."""
        resources = [{"name": k, "nominalQuota": v} for k, v in quota.items()]
        objs = [
            {"kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
            {
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": list(quota),
                            "flavors": [{"name": FLAVOR, "resources": resources}],
                        }
                    ],
                },
            },
            {
                "kind": "LocalQueue",
                "metadata": {"name": local_queue, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            },
        ]
        docs = [{"apiVersion": "kueue.x-k8s.io/v1beta2", **o} for o in objs]
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
