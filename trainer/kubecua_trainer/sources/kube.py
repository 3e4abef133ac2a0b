"""A SandboxPool's sandboxes, found by watching EndpointSlices labelled kubecua.dev/pool=<pool>.

The kubernetes client is synchronous, so the list+watch runs in a thread and hands each new ready
set to the event loop with call_soon_threadsafe. An endpoint counts as ready when its `ready`
condition is true (or unset, which the API defines as ready). The URL is
http://<address>:<port named "episodes", else 8000>.

A label is no proof (issue 42, item 2): anyone who may create a Service can label it
kubecua.dev/pool=<pool>, the EndpointSlice controller copies the label onto its slice, and the
trainer would send that Service's pods episodes carrying the pool's bearer token. So a slice
counts only if its Service is one the operator made for this pool (`foreign_reason`): marked
app.kubernetes.io/managed-by=kubecua-operator (the chart's owner-label admission policy lets no
one else set it), labelled as the pool's sandbox of its own name, and controlled by the
SandboxPool (by uid, when the operator told the trainer its pool's: $KUBECUA_POOL_UID); and only
if the slice belongs to that Service (its controller: the Service, or the pool for an external
sandbox's slice, which the operator writes). Other slices are logged once and never yielded; the
pool reports their Services (its Degraded condition, reason ForeignMembers).

The slices are read as JSON and made models here (`_slice`): a sandbox's Service while its pod
is gone has a slice with no endpoints, which the API server returns as `endpoints: null`, and
the client's V1EndpointSlice refuses null (whatever the ApiClient's client_side_validation: its
models check with a fresh Configuration), so one such slice failed every list and the trainer
kept a stale set. A list or watch that keeps failing is logged once per distinct error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from types import SimpleNamespace
from typing import Any

from kubecua_api.constants import POOL_LABEL, POOL_UID_ENV
from kubecua_api.discovery import (
    SERVICE_NAME_LABEL,
    slice_problem,
    slice_urls,
)
from kubecua_trainer.sources.leases import SandboxLeases

log = logging.getLogger(__name__)


class PoolSource:
    retry_seconds = 2.0  # after a failed list or watch

    def __init__(
        self,
        pool: str,
        namespace: str,
        token: str | None,
        api_client: Any = None,
        pool_uid: str | None = None,
    ) -> None:
        self.pool = pool
        self.namespace = namespace
        self.token = token
        self.pool_uid = os.environ.get(POOL_UID_ENV, "") if pool_uid is None else pool_uid
        self._api_client = api_client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._slices: dict[str, set[str]] = {}
        self._names: dict[str, str] = {}  # url -> its sandbox (the slice's Service, its pod)
        self._services: dict[str, Any] = {}  # Service name -> the Service as last read
        self.foreign: dict[str, str] = {}  # slice name -> why it was ignored
        self._failure = ""  # the last error logged, until a list succeeds

    def _discovery_api(self) -> Any:
        from kubernetes import client

        if self._api_client is None:
            from kubecua_trainer.telemetry.status import load_kube_config

            load_kube_config()
        return client.DiscoveryV1Api(self._api_client)

    def _core_api(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._api_client)

    async def start(self, leases: SandboxLeases) -> None:
        # for wait_ready's timeout; a pool scales: how many it will have is not ours to know
        leases.where = f"SandboxPool {self.namespace}/{self.pool}, from its EndpointSlices"
        loop = asyncio.get_running_loop()
        api = self._discovery_api()
        self._core = self._core_api()

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
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        selector = f"{POOL_LABEL}={self.pool}"
        while not self._stop.is_set():
            try:
                services = self._core.list_namespaced_service(
                    self.namespace, label_selector=selector
                )
                self._services = {s.metadata.name: s for s in services.items}
                listed = json.loads(
                    api.list_namespaced_endpoint_slice(
                        self.namespace, label_selector=selector, _preload_content=False
                    ).data
                )
                self._slices = {}
                for item in listed.get("items") or []:
                    obj = self._slice(api, item)
                    self._slices[obj.metadata.name] = self._urls(obj)
                self._failure = ""
                publish()
                first.set()
                resp = api.list_namespaced_endpoint_slice(
                    self.namespace, label_selector=selector, watch=True,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=5,  # bounds how long stop() waits for this thread
                    _preload_content=False,
                )  # fmt: skip
                try:
                    for line in iter_resp_lines(resp):  # one JSON event a line
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            got = event["object"]  # a Status
                            raise ApiException(status=got.get("code"), reason=got.get("message"))
                        if event["type"] == "BOOKMARK":
                            continue
                        obj = self._slice(api, event["object"])
                        if event["type"] == "DELETED":
                            self._slices.pop(obj.metadata.name, None)
                            self.foreign.pop(obj.metadata.name, None)
                        else:
                            self._slices[obj.metadata.name] = self._urls(obj)
                        publish()
                        if self._stop.is_set():
                            break
                finally:
                    resp.close()
                    resp.release_conn()
            except ApiException as err:
                if err.status != 410:  # 410 Gone: resourceVersion too old, just relist
                    self._failed(err)
            except Exception as err:  # network hiccups: keep the last known set, retry
                self._failed(err)

    def _failed(self, err: Exception) -> None:
        """Note a failed list or watch (a warning when it is not the one noted last) and wait
        before the next: the last known set stays published meanwhile."""
        why = " ".join(f"{type(err).__name__}: {err}".split())  # an ApiException has lines
        if why != self._failure:
            log.warning(
                "SandboxPool %s/%s: watching its EndpointSlices failed, keeping the last known"
                " sandboxes and retrying every %g s: %s",
                self.namespace, self.pool, self.retry_seconds, why,
            )  # fmt: skip
            self._failure = why
        self._stop.wait(self.retry_seconds)

    @staticmethod
    def _slice(api: Any, data: dict[str, Any]) -> Any:
        """A V1EndpointSlice of one slice's JSON; `endpoints: null` (no pod) read as []."""
        data = {**data, "endpoints": data.get("endpoints") or []}
        return api.api_client.deserialize(SimpleNamespace(data=json.dumps(data)), "V1EndpointSlice")

    def _urls(self, endpoint_slice: Any) -> set[str]:
        """slice_urls of a slice of one of the pool's own Services (none of any other), noting
        each URL's sandbox: the Service the slice belongs to, one per sandbox and named as its
        pod (kubernetes.io/service-name, set by the API server)."""
        why = self._foreign(endpoint_slice)
        name = endpoint_slice.metadata.name
        if why:
            if self.foreign.get(name) != why:
                log.warning("pool %s: EndpointSlice %s ignored: %s", self.pool, name, why)
            self.foreign[name] = why
            return set()
        self.foreign.pop(name, None)
        urls = slice_urls(endpoint_slice)
        service = (endpoint_slice.metadata.labels or {}).get(SERVICE_NAME_LABEL)
        if service:
            self._names.update(dict.fromkeys(urls, service))
        return urls

    def _foreign(self, endpoint_slice: Any) -> str:
        """'' when the slice is one of the pool's own Services', else why not (slice_problem)."""
        return slice_problem(
            endpoint_slice, self.pool, self.pool_uid, self._services.get, self._read_service
        )

    def _read_service(self, name: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            service = self._core.read_namespaced_service(name, self.namespace)
        except ApiException as err:
            if err.status == 404:
                self._services.pop(name, None)
                return None
            raise
        self._services[name] = service
        return service

    async def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
            self._thread = None
