"""A real node joined to a local cluster: containerd (runc), the kubelet, kube-proxy and
kube-router's NetworkPolicy controller.

Pods scheduled here really run: Debian's containerd runs them with runc, Debian's CNI plugins give
each an IP on the bridge `kubecua0` (10.244.0.0/24, bridge + host-local + portmap + loopback), and
kube-proxy (iptables mode) makes Services work, kube-router (firewall only) enforces policies.
kubelet, kube-proxy and the pause image come from hack/build-node.sh (the control plane's pinned
k8s.io/kubernetes module), kube-router from its pinned Go module.

What it costs the machine while it runs, and what it puts back on stop():
- processes: containerd, kubelet, kube-proxy (pid files in RUN_DIR) and containerd's shims;
- iptables: kube-proxy's KUBE-* chains (removed with `kube-proxy --cleanup`), kube-router's
  KUBE-ROUTER-*, KUBE-NWPLCY-* and KUBE-POD-FW-* chains and its ipsets (removed by stop()), and
  the CNI plugins' chains (removed by CNI DEL when pods go; stop() deletes every pod first);
- mounts under RUN_DIR (volumes, rootfs, shm), unmounted on stop(); the bridge, deleted;
- the image store in $KUBECUA_CACHE/node/containerd stays, so images are imported once.

One real node per machine (the iptables rules are global); start() refuses a second one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client, config

from kubecua_testkit.tools import binary, cache_dir, run

NAME = "kubecua-node"
LABEL = "kubecua.dev/real-node"
RUN_DIR = Path(os.environ.get("KUBECUA_NODE_RUN_DIR", "/run/kubecua-node"))
BRIDGE = "kubecua0"
CNI_NETWORK = "kubecua-node"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.0.0.0/24"  # kube-apiserver's default range, as kwokctl starts it
SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service: kube-apiserver's default range 10.0.0.0/24
CNI_BIN = Path("/usr/lib/cni")
KUBE_VERSION = next(
    line.split("=", 1)[1].strip()
    for line in (Path(__file__).resolve().parents[2] / "hack" / "versions.env")
    .read_text()
    .splitlines()
    if line.startswith("KUBE_VERSION=")
)
PAUSE_IMAGE = f"localhost/kubecua/pause:{KUBE_VERSION}"
ROUTER_USER = "system:kube-router"
DAEMONS = ("kube-router", "kube-proxy", "kubelet", "containerd")  # stop order
ROUTER_HEALTH = "127.0.0.1:20244"  # kube-router's default health port, bound to loopback here
# Kernel settings the kubelet changes at start (protectKernelDefaults false): stop() restores them.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
)  # fmt: skip


def store_dir() -> Path:
    """containerd's image store: kept between runs so each image is imported once."""
    return cache_dir() / "node" / "containerd"


def node_ip() -> str:
    """The address the host uses for its default route: pods reach the API server there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.254", 9))  # no packet is sent: UDP connect only picks a route
        return str(s.getsockname()[0])


def front_proxy_pki(directory: Path) -> Path:
    """The API aggregation layer's own CA and the client certificate the API server proxies
    with (CN front-proxy-client), as kubeadm makes them: an aggregated API server (metrics-server)
    trusts the X-Remote-User headers only on a connection that certificate opens. Idempotent."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, key = directory / "ca.crt", directory / "ca.key"
    if not ca.exists():
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-subj", "/CN=front-proxy-ca", "-keyout", key, "-out", ca])  # fmt: skip
    client_key, csr, crt = (directory / f"client.{ext}" for ext in ("key", "csr", "crt"))
    if not crt.exists():
        run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", client_key,
             "-out", csr, "-subj", "/CN=front-proxy-client"])  # fmt: skip
        run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", key,
             "-CAcreateserial", "-days", "30", "-out", crt])  # fmt: skip
    return directory


def kwokctl_config(ip: str, pki: Path, front_proxy: Path) -> str:
    """kwokctl settings for a cluster with a real node. The API server also listens on the node's
    address and advertises it there, so pods reach it through the `kubernetes` Service (whose
    ClusterIP its certificate names); it calls the kubelet (logs, exec) with the admin
    certificate. The aggregation layer is set up as kubeadm does it (`front_proxy`: see
    front_proxy_pki), and it reaches an aggregated API at its Service's endpoint address
    (metrics-server runs on the host, kubecua_testkit.metrics_server). Everything else stays on
    loopback, as in hack/kwokctl.yaml."""
    args = {
        "bind-address": "0.0.0.0",
        "advertise-address": ip,
        "kubelet-client-certificate": str(pki / "admin.crt"),
        "kubelet-client-key": str(pki / "admin.key"),
        "kubelet-preferred-address-types": "InternalIP",  # no DNS name for the node here
        # kwokctl proxies with the admin certificate, which no requestheader CA vouches for
        "proxy-client-cert-file": str(front_proxy / "client.crt"),
        "proxy-client-key-file": str(front_proxy / "client.key"),
        "requestheader-client-ca-file": str(front_proxy / "ca.crt"),
        "requestheader-allowed-names": "front-proxy-client",
        "requestheader-username-headers": "X-Remote-User",
        "requestheader-group-headers": "X-Remote-Group",
        "requestheader-extra-headers-prefix": "X-Remote-Extra-",
        "enable-aggregator-routing": "true",
    }
    replaced = {"bind-address", "proxy-client-cert-file", "proxy-client-key-file"}
    doc = {
        "kind": "KwokctlConfiguration",
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "options": {"bindAddress": "127.0.0.1", "kubeApiserverCertSANs": [SERVICE_IP, ip]},
        "componentsPatches": [{
            "name": "kube-apiserver",
            # override replaces kwokctl's own flag; the others are added
            "extraArgs": [{"key": k, "value": v, "override": k in replaced}
                          for k, v in args.items()],
        }, {
            # kwokctl's binary runtime lets kwok manage every node, which would fake the real
            # node's heartbeats and pod statuses: only the nodes kwokctl creates (annotated fake).
            "name": "kwok-controller",
            "extraArgs": [
                {"key": "manage-all-nodes", "value": "false", "override": True},
                {"key": "manage-nodes-with-annotation-selector",
                 "value": "kwok.x-k8s.io/node=fake"},
            ],
        }],
    }  # fmt: skip
    return yaml.safe_dump(doc)


@dataclass
class Paths:
    root: Path = RUN_DIR

    def __getattr__(self, item: str) -> Path:  # logs, pids, cni, kubelet, ...
        return self.root / item.replace("_", "-")


def _ensure_tools() -> dict[str, Path]:
    tools = {n: binary(n) for n in ("kubelet", "kube-proxy", "kube-router")}
    for name in ("containerd", "ctr", "runc", "conntrack", "iptables", "ipset", "podman"):
        found = shutil.which(name)
        if not found:
            raise FileNotFoundError(f"{name} is missing: run `make setup-node` (hack/apt/node.txt)")
        tools[name] = Path(found)
    for plugin in ("bridge", "host-local", "portmap", "loopback"):
        if not (CNI_BIN / plugin).exists():
            raise FileNotFoundError(f"CNI plugin {CNI_BIN / plugin} is missing: `make setup-node`")
    return tools


class RealNode:
    """Start/stop the node for the cluster whose admin kubeconfig and kwokctl dir are given."""

    def __init__(self, cluster_name: str, kubeconfig: Path, pki: Path) -> None:
        self.cluster_name = cluster_name
        self.kubeconfig = kubeconfig
        self.pki = pki  # kwokctl's ca.crt/ca.key: node and proxy certificates are signed with it
        self.p = Paths()
        self.ip = node_ip()

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self, images: list[str] | tuple[str, ...] = (), timeout: float = 120) -> None:
        owner = self.p.root / "cluster"
        if owner.exists():
            other = owner.read_text().strip()
            if other == self.cluster_name and all(_alive(self.p, n) for n in DAEMONS):
                self.import_images(list(images))  # already up: only newer images
                return
            if other != self.cluster_name and _any_alive(self.p):
                raise RuntimeError(
                    f"a real node already runs for cluster {other!r} (one per machine): "
                    f"stop it first (`make cluster-down` or python -m kubecua_testkit.cluster down "
                    f"--name {other})"
                )
        self.stop()  # whatever a killed run left behind
        tools = _ensure_tools()
        for d in ("logs", "pids", "pki", "cni", "cni-data", "kubelet", "pod-logs"):
            (self.p.root / d).mkdir(parents=True, exist_ok=True)
        owner.write_text(self.cluster_name)
        saved = {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS}
        (self.p.root / "sysctls.json").write_text(json.dumps(saved))
        _sysctl("net/ipv4/ip_forward", "1")
        _sysctl("net/bridge/bridge-nf-call-iptables", "1")
        self._write_cni()
        self._start_containerd(tools)
        self._forget_containers()
        self.import_images([PAUSE_IMAGE, *images])
        server = self._server()
        self._credentials(server)
        self._start_kubelet(tools)
        self._wait_node_ready(timeout)
        self._start_kube_proxy(tools)
        self._start_kube_router(tools)

    def stop(self) -> None:
        """Drain the node (CNI DEL for every pod), stop the daemons, undo iptables, mounts and
        the bridge. Safe to call twice and after a crash."""
        if not self.p.root.exists():
            return
        self._drain()
        for name in DAEMONS:
            _stop_daemon(self.p, name)
            if name == "kube-proxy":
                _cleanup_proxy_rules()
        _cleanup_kubelet_rules()  # kube-router's KUBE-ROUTER-* and KUBE-NWPLCY-* chains too
        _destroy_router_ipsets()
        _kill_shims(self.p.root / "containerd.sock")
        _unmount_under(self.p.root)
        _delete_leftover_cni()
        _remove_cgroups()
        saved = self.p.root / "sysctls.json"
        for key, value in (json.loads(saved.read_text()) if saved.exists() else {}).items():
            _sysctl(key, value)
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
        last = cache_dir() / "node" / "last-logs"  # kept for a post-mortem
        shutil.rmtree(last, ignore_errors=True)
        if self.p.logs.exists():
            shutil.copytree(self.p.logs, last)
        shutil.rmtree(self.p.root, ignore_errors=True)

    # ---- containerd --------------------------------------------------------------------------
    def _write_cni(self) -> None:
        conflist = {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                             "routes": [{"dst": "0.0.0.0/0"}],
                             "dataDir": str(self.p.cni_data)},
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }  # fmt: skip
        (self.p.cni / "10-kubecua.conflist").write_text(json.dumps(conflist, indent=2))

    def _start_containerd(self, tools: dict[str, Path]) -> None:
        store_dir().mkdir(parents=True, exist_ok=True)
        conf = f"""version = 2
root = "{store_dir()}"
state = "{self.p.root / "containerd"}"
[grpc]
  address = "{self.p.root / "containerd.sock"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj below its own
  # (the kubelet asks -998 for pod sandboxes): keep scores at or above containerd's.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{self.p.cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "{self.p.root / "runc"}"
"""
        path = self.p.root / "containerd.toml"
        path.write_text(conf)
        _start_daemon(self.p, "containerd", [tools["containerd"], "--config", path])
        _wait(lambda: self._ctr("version", check=False).returncode == 0, 30, "containerd")

    def _ctr(self, *args: str, check: bool = True):
        sock = self.p.root / "containerd.sock"
        return run(["ctr", "--address", sock, "-n", "k8s.io", *args], check=check, timeout=60)

    def import_images(self, refs: list[str]) -> dict[str, float]:
        """Copy podman images into containerd's k8s.io namespace (no registry); skips an image
        whose podman id was already imported. Returns seconds spent per imported image."""
        record = store_dir() / "kubecua-imported.json"
        done = json.loads(record.read_text()) if record.exists() else {}
        listed = set(self._ctr("images", "ls", "-q").stdout.split())
        spent = {}
        for ref in refs:
            image_id = run(
                ["podman", "image", "inspect", "--format", "{{.Id}}", ref]
            ).stdout.strip()
            if done.get(ref) == image_id and ref in listed:
                continue
            started = time.monotonic()
            if ref in listed:
                # Untag the older version and drop its id alias before the import: re-importing
                # under the same name left every old version behind (27 GB after a day of
                # rebuilds filled the disk), and holding the old trainer image (5 GB, twice with
                # its unpacked snapshot) while the new one unpacks ran a full disk out of space.
                self._ctr("images", "rm", ref, check=False)
                self._prune_aliases(sync=True)
            sock = self.p.root / "containerd.sock"
            pipeline = (
                f"podman save --format docker-archive {ref} | "
                f"ctr --address {sock} -n k8s.io images import -"
            )
            subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], check=True,
                           capture_output=True, timeout=1800)  # fmt: skip
            done[ref] = image_id
            record.write_text(json.dumps(done, indent=1))
            spent[ref] = round(time.monotonic() - started, 1)
        self._prune_aliases()
        if spent:  # a figure for docs/real-node.md: the last import of each image
            timings = store_dir() / "kubecua-import-seconds.json"
            last = json.loads(timings.read_text()) if timings.exists() else {}
            timings.write_text(json.dumps(last | spent, indent=1))
        return spent

    def _forget_containers(self) -> None:
        """The last run's containers (the kubelet stops before it collects the exited ones) keep
        their images' snapshots alive: none of them runs now, so drop them all before the
        kubelet starts; it recreates what its pods need."""
        ids = self._ctr("containers", "ls", "-q").stdout.split()
        if ids:
            self._ctr("containers", "rm", *ids, check=False)

    def _prune_aliases(self, sync: bool = False) -> None:
        """The CRI names each image also by its id (`sha256:<id>`); that alias outlives the tag's
        removal and kept every replaced version's layers (5 GB per trainer rebuild). Remove the
        aliases whose image no tag points at any more. containerd collects their layers in the
        background: waiting for it (--sync) took over a minute for three images under load, so
        only a removal before an import (sync=True) waits."""
        rows = [line.split() for line in self._ctr("images", "ls").stdout.splitlines()[1:]]
        tagged = {r[2] for r in rows if len(r) > 2 and not r[0].startswith("sha256:")}
        stale = [r[0] for r in rows if len(r) > 2 and r[0].startswith("sha256:")
                 and r[2] not in tagged]  # fmt: skip
        if stale and sync:  # wait until the layers are gone: an import follows
            sock = self.p.root / "containerd.sock"
            run(["ctr", "--address", sock, "-n", "k8s.io", "images", "rm", "--sync", *stale],
                check=False, timeout=600)  # fmt: skip
        elif stale:
            self._ctr("images", "rm", *stale, check=False)

    # ---- credentials ------------------------------------------------------------------------
    def _server(self) -> str:
        admin = yaml.safe_load(self.kubeconfig.read_text())
        return str(admin["clusters"][0]["cluster"]["server"])

    def _credentials(self, server: str) -> None:
        """Client certificates signed by the cluster CA: the kubelet as system:node:<name> (Node
        authorizer), kube-proxy as system:kube-proxy (bound to system:node-proxier)."""
        for who, cn, org in (
            ("kubelet", f"system:node:{NAME}", "system:nodes"),
            ("kube-proxy", "system:kube-proxy", ""),
            ("kube-router", ROUTER_USER, ""),
        ):
            key, crt, csr = (self.p.pki / f"{who}.{ext}" for ext in ("key", "crt", "csr"))
            subj = f"/CN={cn}" + (f"/O={org}" if org else "")
            run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                 "-out", csr, "-subj", subj])  # fmt: skip
            run(["openssl", "x509", "-req", "-in", csr, "-CA", self.pki / "ca.crt",
                 "-CAkey", self.pki / "ca.key", "-CAcreateserial", "-days", "30",
                 "-out", crt])  # fmt: skip
            kubeconfig = {
                "apiVersion": "v1", "kind": "Config", "current-context": who,
                "clusters": [{"name": "local", "cluster": {
                    "server": server, "certificate-authority": str(self.pki / "ca.crt")}}],
                "users": [{"name": who, "user": {
                    "client-certificate": str(crt), "client-key": str(key)}}],
                "contexts": [{"name": who, "context": {"cluster": "local", "user": who}}],
            }  # fmt: skip
            (self.p.root / f"{who}.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        self._serving_certificate()

    def _serving_certificate(self) -> None:
        """The kubelet's serving certificate, signed by the cluster CA for the node's address,
        so a client that verifies it (metrics-server with --kubelet-certificate-authority) can:
        the kubelet's own self-signed one names no CA a client could trust."""
        key, csr, crt, ext = (self.p.pki / f"kubelet-serving.{e}" for e in
                              ("key", "csr", "crt", "ext"))  # fmt: skip
        ext.write_text(f"subjectAltName=IP:{self.ip},DNS:{NAME}\nextendedKeyUsage=serverAuth\n")
        run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", csr, "-subj", f"/CN=system:node:{NAME}/O=system:nodes"])  # fmt: skip
        run(["openssl", "x509", "-req", "-in", csr, "-CA", self.pki / "ca.crt",
             "-CAkey", self.pki / "ca.key", "-CAcreateserial", "-days", "30",
             "-extfile", ext, "-out", crt])  # fmt: skip

    # ---- kubelet and kube-proxy ------------------------------------------------------------
    def _start_kubelet(self, tools: dict[str, Path]) -> None:
        conf = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",  # no systemd here
            "failCgroupV1": False,  # this machine has cgroup v1 only
            "failSwapOn": False,
            "address": "0.0.0.0",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(self.p.pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(self.p.pki / "kubelet-serving.key"),
            "containerRuntimeEndpoint": f"unix://{self.p.root / 'containerd.sock'}",
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "resolvConf": "/etc/resolv.conf",
            "maxPods": 30,
            "podCIDR": POD_CIDR,
            # Images come from podman, not a registry: never garbage-collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            # A shared test machine: only evict when the disk is really full.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                             "imagefs.available": "2%"},
            "serializeImagePulls": False,
            "containerLogMaxSize": "10Mi",
            "podLogsDir": str(self.p.pod_logs),
            "nodeStatusReportFrequency": "10s",
        }  # fmt: skip
        path = self.p.root / "kubelet.yaml"
        path.write_text(yaml.safe_dump(conf))
        argv = [
            tools["kubelet"], "--config", path, "--kubeconfig", self.p.root / "kubelet.kubeconfig",
            "--root-dir", self.p.kubelet, "--hostname-override", NAME, "--node-ip", self.ip,
            "--node-labels", f"{LABEL}=true",
        ]  # fmt: skip
        _start_daemon(self.p, "kubelet", argv)

    def _wait_node_ready(self, timeout: float) -> None:
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))

        def ready() -> bool:
            _check_alive(self.p, "kubelet")
            try:
                node = core.read_node(NAME)
            except client.ApiException:
                return False
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )

        _wait(ready, timeout, f"node {NAME} Ready")

    def _start_kube_proxy(self, tools: dict[str, Path]) -> None:
        conf = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "hostnameOverride": NAME,
            "clientConnection": {"kubeconfig": str(self.p.root / "kube-proxy.kubeconfig")},
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Leave the host's conntrack sysctls and route_localnet as they are.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False},
        }  # fmt: skip
        path = self.p.root / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(conf))
        _start_daemon(self.p, "kube-proxy", [tools["kube-proxy"], "--config", path])

        def healthy() -> bool:
            _check_alive(self.p, "kube-proxy")
            probe = subprocess.run(
                ["curl", "-sf", "http://127.0.0.1:10256/healthz"], capture_output=True, check=False
            )
            return probe.returncode == 0

        _wait(healthy, 60, "kube-proxy healthz")

    def _start_kube_router(self, tools: dict[str, Path]) -> None:
        """kube-router's NetworkPolicy controller alone (no routing, no service proxy: the bridge
        and kube-proxy do those). It filters pod traffic with iptables and ipset in the FORWARD
        chain, which bridged pod-to-pod packets cross (bridge-nf-call-iptables); traffic from the
        node itself (probes, the host's Prometheus) stays allowed, as kube-router means it to."""
        self._grant_router()
        argv = [
            tools["kube-router"], "--run-firewall=true", "--run-router=false",
            "--run-service-proxy=false", "--kubeconfig", self.p.root / "kube-router.kubeconfig",
            "--hostname-override", NAME, "--service-cluster-ip-range", SERVICE_CIDR,
            "--health-port", ROUTER_HEALTH.rsplit(":", 1)[1], "--iptables-sync-period", "1m",
        ]  # fmt: skip
        _start_daemon(self.p, "kube-router", argv)

        def enforcing() -> bool:
            """Healthy, and its policy chain hooked into FORWARD: the controller starts only
            once every informer has synced (a missing grant would stop it there, silently)."""
            _check_alive(self.p, "kube-router")
            health = subprocess.run(["curl", "-sf", f"http://{ROUTER_HEALTH}/healthz"],
                                    capture_output=True, check=False)  # fmt: skip
            forward = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True,
                                     text=True, check=False).stdout  # fmt: skip
            return health.returncode == 0 and "-j KUBE-ROUTER-FORWARD" in forward

        _wait(enforcing, 60, "kube-router's policy controller")

    def _grant_router(self) -> None:
        """What kube-router reads (its informers must all sync before the policy controller
        starts, services and endpoints included), and nothing more: least privilege."""
        rbac = client.RbacAuthorizationV1Api(
            config.new_client_from_config(config_file=str(self.kubeconfig))
        )
        role = {
            "metadata": {"name": ROUTER_USER},
            "rules": [
                {"apiGroups": [""],
                 "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": ["get", "list", "watch"]},
            ],
        }  # fmt: skip
        binding = {
            "metadata": {"name": ROUTER_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": ROUTER_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": ROUTER_USER}],
        }  # fmt: skip
        for create, replace, body in (
            (rbac.create_cluster_role, rbac.replace_cluster_role, role),
            (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, binding),
        ):
            try:
                create(body)
            except client.ApiException as err:
                if err.status != 409:
                    raise
                replace(ROUTER_USER, body)  # a reused cluster: bring it up to date

    def _drain(self) -> None:
        """Delete every pod bound to this node and wait for the kubelet to tear them down (so the
        CNI plugins remove their iptables rules); no-op when the API server or kubelet is gone."""
        if not (self.kubeconfig.exists() and _alive(self.p, "kubelet")):
            return
        try:
            core = client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))
            core.patch_node(NAME, {"spec": {"unschedulable": True}})
            selector = f"spec.nodeName={NAME}"
            for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
                core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=5
                )
            _wait(
                lambda: not core.list_pod_for_all_namespaces(field_selector=selector).items,
                90,
                "pods on the real node to go",
            )
        except Exception as err:  # the API may be gone already; clean up below regardless
            print(f"[real-node] drain incomplete: {err}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.p.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# ---- process helpers ----------------------------------------------------------------------------
def _start_daemon(p: Paths, name: str, argv: list) -> None:
    log = (p.logs / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        [str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    (p.pids / name).write_text(f"{proc.pid} {_start_time(proc.pid)}")


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot): with the pid, it names one process,
    so a pid reused since is never mistaken for the daemon."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _pid(p: Paths, name: str) -> int | None:
    path = p.pids / name
    if not path.exists():
        return None
    pid, started = path.read_text().split()
    try:
        return int(pid) if _start_time(int(pid)) == started else None
    except FileNotFoundError:
        return None


def _alive(p: Paths, name: str) -> bool:
    pid = _pid(p, name)
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _any_alive(p: Paths) -> bool:
    return any(_alive(p, n) for n in DAEMONS)


def _check_alive(p: Paths, name: str) -> None:
    if not _alive(p, name):
        log = p.logs / f"{name}.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
        raise RuntimeError(f"{name} exited; the end of its log:\n{tail}")


def _stop_daemon(p: Paths, name: str, timeout: float = 30) -> None:
    pid = _pid(p, name)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(p, name) and time.monotonic() < deadline:
        time.sleep(0.2)  # a process exit pushes no event we could wait on
    if _alive(p, name):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # reap it when this process started it
        os.waitpid(pid, os.WNOHANG)


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def _sysctl(key: str, value: str) -> None:
    Path("/proc/sys", key).write_text(value)


def _cleanup_proxy_rules() -> None:
    if Path(binary("kube-proxy")).exists():
        subprocess.run([str(binary("kube-proxy")), "--cleanup"], capture_output=True, check=False)


def _cleanup_kubelet_rules() -> None:
    """The kubelet's own chains (KUBE-FIREWALL, which drops non-local traffic to 127/8,
    KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) outlive it: remove the jumps to them, then them."""
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            dump = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True,
                                  check=False).stdout.splitlines()  # fmt: skip
            chains = [line.split()[1] for line in dump if line.startswith("-N KUBE-")]
            for line in dump:
                words = shlex.split(line)
                target = words[words.index("-j") + 1] if "-j" in words else ""
                if words[0] == "-A" and target in chains and not words[1].startswith("KUBE-"):
                    subprocess.run([tool, "-t", table, "-D", *words[1:]], capture_output=True)
            for chain in chains:
                subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
            for chain in chains:
                subprocess.run([tool, "-t", table, "-X", chain], capture_output=True)


def _destroy_router_ipsets() -> None:
    """kube-router's ipsets (pods and namespaces a policy selects), once no rule uses them. Its
    own --cleanup-config is not used: in v2.1.0 it leaves the chains and then crashes in the
    service proxy's clean-up, which never ran here."""
    if not shutil.which("ipset"):
        return
    names = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True,
                           check=False).stdout.split()  # fmt: skip
    for name in names:
        if name.startswith(("KUBE-", "kube-router")):
            subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)


def _kill_shims(sock: Path) -> None:
    """containerd's shims outlive it by design; end the ones of this node's containerd."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(sock).encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    prefix = str(root) + "/"
    points = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _remove_cgroups() -> None:
    """The kubelet's empty kubepods cgroups, deepest first."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / "kubepods"
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _rmdir(d)
        _rmdir(top)


def _rmdir(d: Path) -> None:
    with contextlib.suppress(OSError):
        d.rmdir()


def _delete_leftover_cni() -> None:
    """Only after a crash (pods never drained): the bridge plugin's NAT chains carry our network
    name in their comment. (Network namespaces live under RUN_DIR and are unmounted with it.)"""
    rules = subprocess.run(["iptables", "-t", "nat", "-S", "POSTROUTING"], capture_output=True,
                           text=True, check=False).stdout.splitlines()  # fmt: skip
    for rule in rules:
        if f'name: \\"{CNI_NETWORK}\\"' in rule or f"name: {CNI_NETWORK}" in rule:
            parts = rule.split()
            chain = parts[parts.index("-j") + 1] if "-j" in parts else None
            subprocess.run(["bash", "-c", f"iptables -t nat {rule.replace('-A ', '-D ', 1)}"],
                           capture_output=True, check=False)  # fmt: skip
            if chain and chain.startswith("CNI-"):
                subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True)
                subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True)
