"""make bench-operator's EndpointSlice watcher keeps watching (issue 20): it scaled 1,000 sandboxes
and then crashed, because its watch stream died on "Response ended prematurely" and nothing
watched again, so the discovery latency was never printed. Here the watcher's connection goes
through a proxy the test cuts (a broken stream, then refused connections) and heals. (Its other
path, listing again after 410 Gone, is not forced here: the test cluster's watch cache keeps
every version since the cluster started.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import config

from bench.scale import SliceWatcher

from .conftest import wait_until
from .test_stale_cache import Partition


def endpoint_slice(namespace: str, sandbox: str, ready: bool) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": sandbox,
            "namespace": namespace,
            "labels": {"kubecua.dev/pool": "desks", "kubecua.dev/sandbox": sandbox},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}],
        "ports": [{"name": "episodes", "port": 8000, "protocol": "TCP"}],
    }


def set_ready(kube: Any, namespace: str, sandbox: str, ready: bool) -> None:
    endpoints = [{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}]
    kube.patch("EndpointSlice", namespace, sandbox, {"endpoints": endpoints})


def test_the_bench_watcher_resumes_after_its_stream_breaks(cluster, kube, namespace, tmp_path):
    config_ = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = urlsplit(config_["clusters"][0]["cluster"]["server"])
    proxy = Partition(server.hostname or "127.0.0.1", server.port or 443)
    config_["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    proxied = tmp_path / "proxied.yaml"
    proxied.write_text(yaml.safe_dump(config_))
    kube.create(endpoint_slice(namespace, "desks-0", ready=False))
    watcher = SliceWatcher(config.new_client_from_config(str(proxied)), namespace, "desks")
    try:
        watcher.wait("desks-0", False)
        assert watcher.relists == 1
        proxy.cut()  # the stream breaks mid-watch, and new connections are refused
        set_ready(kube, namespace, "desks-0", True)
        wait_until(lambda: watcher.reconnects >= 2, 30, "the watcher to try again while cut")
        assert watcher.ready["desks-0"] is False
        proxy.heal()
        watcher.wait("desks-0", True)  # resumed from its resourceVersion: the change arrives
        assert watcher.relists == 1
        set_ready(kube, namespace, "desks-0", False)
        watcher.wait("desks-0", False)
    finally:
        watcher.stop = True
        proxy.close()
