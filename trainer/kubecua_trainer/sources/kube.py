"""A SandboxPool's sandboxes, found by watching EndpointSlices labelled kubecua.dev/pool=<pool>.

The kubernetes client is synchronous, so the list+watch runs in a thread and hands each new ready
set to the event loop with call_soon_threadsafe. An endpoint counts as ready when its `ready`
condition is true (or unset, which the API defines as ready). The URL is
http://<address>:<port named "episodes", else 8000>.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from kubecua_api.constants import POOL_LABEL, URL_ANNOTATION
from kubecua_trainer.sources.leases import SandboxLeases

EPISODE_PORT_NAME = "episodes"
EPISODE_PORT = 8000


def slice_urls(endpoint_slice: Any) -> set[str]:
    """Ready episode URLs of one discovery.k8s.io/v1 EndpointSlice (client model object).

    An external pool's slice names its sandbox's URL in the annotation kubecua.dev/url: the API
    server refuses loopback addresses in slices, so the address itself may be a placeholder."""
    annotated = (endpoint_slice.metadata.annotations or {}).get(URL_ANNOTATION)
    if annotated:
        endpoints = endpoint_slice.endpoints or []
        serving = any(ep.conditions is None or ep.conditions.ready is not False for ep in endpoints)
        return {annotated.rstrip("/")} if serving else set()
    ports = endpoint_slice.ports or []
    port = next((p.port for p in ports if p.name == EPISODE_PORT_NAME), None)
    port = port or (ports[0].port if len(ports) == 1 and ports[0].port else EPISODE_PORT)
    urls = set()
    for ep in endpoint_slice.endpoints or []:
        ready = ep.conditions.ready if ep.conditions is not None else None
        if ready is False:
            continue
        for addr in ep.addresses or []:
            host = f"[{addr}]" if ":" in addr else addr
            urls.add(f"http://{host}:{port}")
    return urls


class PoolSource:
    def __init__(
        self, pool: str, namespace: str, token: str | None, api_client: Any = None
    ) -> None:
        self.pool = pool
        self.namespace = namespace
        self.token = token
        self._api_client = api_client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._slices: dict[str, set[str]] = {}
        self._names: dict[str, str] = {}  # url -> its sandbox (the slice's Service, its pod)

    def _discovery_api(self) -> Any:
        from kubernetes import client

        if self._api_client is None:
            from kubecua_trainer.status import load_kube_config

            load_kube_config()
        return client.DiscoveryV1Api(self._api_client)

    async def start(self, leases: SandboxLeases) -> None:
        # for wait_ready's timeout; a pool scales: how many it will have is not ours to know
        leases.where = f"SandboxPool {self.namespace}/{self.pool}, from its EndpointSlices"
        loop = asyncio.get_running_loop()
        api = self._discovery_api()

        def publish() -> None:
            urls = sorted(set().union(*self._slices.values())) if self._slices else []
            leases.names = dict(self._names)  # for the live view's commands (liveview.py)
            loop.call_soon_threadsafe(leases.set_ready, urls)

        first = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(api, publish, first), name=f"watch-{self.pool}", daemon=True
        )
        self._thread.start()
        await asyncio.to_thread(first.wait, 30)

    def _run(self, api: Any, publish: Any, first: threading.Event) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        selector = f"{POOL_LABEL}={self.pool}"
        while not self._stop.is_set():
            try:
                listed = api.list_namespaced_endpoint_slice(self.namespace, label_selector=selector)
                self._slices = {s.metadata.name: self._urls(s) for s in listed.items}
                publish()
                first.set()
                w = watch.Watch()
                for event in w.stream(
                    api.list_namespaced_endpoint_slice,
                    self.namespace,
                    label_selector=selector,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=5,  # bounds how long stop() waits for this thread
                ):
                    obj = event["object"]
                    if event["type"] == "DELETED":
                        self._slices.pop(obj.metadata.name, None)
                    else:
                        self._slices[obj.metadata.name] = self._urls(obj)
                    publish()
                    if self._stop.is_set():
                        w.stop()
            except ApiException as err:
                if err.status != 410:  # 410 Gone: resourceVersion too old, just relist
                    self._stop.wait(2.0)
            except Exception:  # network hiccups: keep the last known set, retry
                self._stop.wait(2.0)

    def _urls(self, endpoint_slice: Any) -> set[str]:
        """slice_urls, noting each URL's sandbox: the Service the slice belongs to, one per
        sandbox and named as its pod (kubernetes.io/service-name, set by the API server)."""
        urls = slice_urls(endpoint_slice)
        service = (endpoint_slice.metadata.labels or {}).get("kubernetes.io/service-name")
        if service:
            self._names.update(dict.fromkeys(urls, service))
        return urls

    async def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
            self._thread = None
