"""metrics-server as a local process on the real node's host, serving metrics.k8s.io to the HPA.

hack/build-cluster-addons.sh builds `metrics-server` at METRICS_SERVER_VERSION (hack/versions.env).
It runs as an in-cluster install would, with these differences (docs/cluster-integrations.md):
- It is a host process, not a pod: the APIService points at a selectorless Service whose
  Endpoints name the node's address and the port it listens on; the API server reaches it there
  (--enable-aggregator-routing, set by node.kwokctl_config with the front-proxy certificates).
- It authenticates as its ServiceAccount (kube-system/metrics-server) with a token from the
  TokenRequest API, so metrics-server's own RBAC manifests from its module apply unchanged.
- Its serving certificate is signed by the cluster CA for the Service's name, which the
  APIService carries as caBundle (the upstream manifest skips TLS verification instead); it
  verifies the kubelet's serving certificate with the same CA (node.py signs it).
- It scrapes the real node only (--node-selector): kwok nodes have no kubelet to serve
  /metrics/resource.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from kubecua_testkit import node as real
from kubecua_testkit.cluster import Cluster, cluster_dir
from kubecua_testkit.kueue import module_dir
from kubecua_testkit.tools import binary, run

NAMESPACE = "kube-system"
NAME = "metrics-server"
API_SERVICE = "v1beta1.metrics.k8s.io"


class MetricsServer:
    """`start()` applies the RBAC, Service and APIService and runs metrics-server until the
    APIService is Available; `stop()` ends it and removes the APIService."""

    def __init__(self, cluster: Cluster, workdir: Path, resolution_s: int = 10) -> None:
        self.cluster, self.workdir, self.resolution_s = cluster, workdir, resolution_s
        self.source = module_dir("sigs.k8s.io/metrics-server", "METRICS_SERVER_VERSION")
        self.pki = cluster_dir(cluster.name) / "pki"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / "metrics-server.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        rbac = self.source / "manifests" / "base" / "rbac.yaml"
        self.cluster.kubectl("apply", "-f", str(rbac))
        ip = real.node_ip()
        self.port = _free_port(ip)
        self._serving_certificate()
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(self._objects(ip)))
        kubeconfig = self._kubeconfig()
        args = [
            binary("metrics-server"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={ip}", f"--secure-port={self.port}",
            f"--tls-cert-file={self.workdir / 'tls.crt'}",
            f"--tls-private-key-file={self.workdir / 'tls.key'}",
            f"--kubelet-certificate-authority={self.pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--node-selector={real.LABEL}=true",
            f"--metric-resolution={self.resolution_s}s",
            # it must stay below the resolution (its default, 10 s, equals the shortest one)
            f"--kubelet-request-timeout={max(1, self.resolution_s // 2)}s",
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(a) for a in args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_available()

    def _serving_certificate(self) -> None:
        key, csr, crt, ext = (self.workdir / f"tls.{e}" for e in ("key", "csr", "crt", "ext"))
        dns = f"{NAME}.{NAMESPACE}.svc"  # the name the API server checks (aggregator routing)
        ext.write_text(f"subjectAltName=DNS:{dns}\nextendedKeyUsage=serverAuth\n")
        run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", csr, "-subj", f"/CN={dns}"])  # fmt: skip
        run(["openssl", "x509", "-req", "-in", csr, "-CA", self.pki / "ca.crt",
             "-CAkey", self.pki / "ca.key", "-CAcreateserial", "-days", "2",
             "-extfile", ext, "-out", crt])  # fmt: skip

    def _objects(self, ip: str) -> list[dict[str, Any]]:
        """The Service (no selector: nothing in the cluster runs it), its Endpoints (the
        EndpointSlice mirroring controller makes the slice), and the APIService from the
        module's own manifest, verifying the server with the cluster CA."""
        port = {"name": "https", "port": 443, "targetPort": self.port, "protocol": "TCP"}
        service = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"ports": [port]},
        }  # fmt: skip
        endpoints = {
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "subsets": [{"addresses": [{"ip": ip}],
                         "ports": [{"name": "https", "port": self.port, "protocol": "TCP"}]}],
        }  # fmt: skip
        api_service = yaml.safe_load(
            (self.source / "manifests" / "base" / "apiservice.yaml").read_text()
        )
        spec = api_service["spec"]
        spec.pop("insecureSkipTLSVerify", None)
        spec["caBundle"] = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        return [service, endpoints, api_service]

    def _kubeconfig(self) -> Path:
        """The ServiceAccount's token (2 h, longer than any test) in a kubeconfig."""
        token = self.cluster.kubectl(
            "create", "token", NAME, "-n", NAMESPACE, "--duration=2h"
        ).stdout.strip()
        server = yaml.safe_load(self.cluster.kubeconfig.read_text())["clusters"][0]["cluster"][
            "server"
        ]
        conf = {
            "apiVersion": "v1", "kind": "Config", "current-context": NAME,
            "clusters": [{"name": "local", "cluster": {
                "server": server, "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": NAME, "user": {"token": token}}],
            "contexts": [{"name": NAME, "context": {"cluster": "local", "user": NAME}}],
        }  # fmt: skip
        path = self.workdir / "kubeconfig.yaml"
        path.write_text(yaml.safe_dump(conf))
        path.chmod(0o600)
        return path

    def _wait_available(self, timeout: float = 120) -> None:
        """Until the APIService is Available (the API server reached it and it answered)."""
        query = '{.status.conditions[?(@.type=="Available")].status}'
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"metrics-server exited {self.proc.returncode}: {self.tail()}")
            state = self.cluster.kubectl(
                "get", "apiservice", API_SERVICE, "-o", f"jsonpath={query}", check=False
            ).stdout
            if state == "True":
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{API_SERVICE} not Available after {timeout}s: {self.tail()}")
            time.sleep(0.5)  # the APIService's status is written by the API server's controller

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.cluster.kubectl("delete", "apiservice", API_SERVICE, check=False)
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None


def _free_port(ip: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])
