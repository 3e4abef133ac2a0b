"""The sandboxes verification leases from, and a SandboxPool's followed while it runs.

`Sandboxes` is the set verify() reads: fixed (local desktops, a list of URLs) or following a
pool. `PoolWatch` keeps it equal to the pool's ready sandboxes: one list of the pool's Services
and EndpointSlices (label kubecua.dev/pool), then a watch of the slices, so a sandbox that turns
ready later is leased too and one that goes away is dropped (issue 45). Which slices count is
api/kubecua_api/discovery.py's rule, the trainer's too (trainer/kubecua_trainer/sources/kube.py,
whose watch this one follows; not imported: the trainer's environment is torch's): only slices
of Services the operator made for the pool, since the episodes carry the pool's token.

The slices are read as JSON, not as the kubernetes client's models: the client refuses a slice
whose `endpoints` is null (a sandbox's Service while its pod is gone), and one such slice would
stop the watch. discovery.py reads objects by attribute, so each slice is wrapped (_Obj).
Left out: the Services are not watched; one is read when a slice names a Service not seen yet
or of another uid (a new sandbox), as the trainer does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubecua_api.constants import GROUP, POOL_LABEL, SANDBOXPOOL_PLURAL, VERSION
from kubecua_api.discovery import (
    slice_problem,
    slice_urls,
)

log = logging.getLogger(__name__)
MAPS = {"labels", "annotations"}  # JSON objects that stay dicts: their keys are not fields
FIELDS = {"ownerReferences": "owner_references", "apiVersion": "api_version"}


class Sandboxes:
    """The episode URLs verification may lease now. `follows`: the set may change while
    verification runs (a pool), so an empty set is waited on instead of ending it."""

    def __init__(self, urls: Iterable[str] = (), follows: bool = False) -> None:
        self.urls: frozenset[str] = frozenset(urls)
        self.follows = follows
        self._changed = asyncio.Event()

    def set_ready(self, urls: Iterable[str]) -> None:
        new = frozenset(urls)
        if new != self.urls:
            self.urls = new
            self._changed.set()

    async def changed(self) -> None:
        """Return at the next change of the set (at once if one came since the last call)."""
        await self._changed.wait()
        self._changed.clear()


class _Obj:
    """A JSON object read by attribute, snake_case as the client's models: a missing field is
    None, as the models have it."""

    def __init__(self, data: dict[str, Any]) -> None:
        for key, value in data.items():
            setattr(self, FIELDS.get(key, key), value if key in MAPS else _wrap(value))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return _Obj(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def api_client() -> Any:
    """A kubernetes ApiClient: the service account in a pod, else $KUBECONFIG."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    return client.ApiClient()


class PoolWatch:
    """Follows pool `pool`'s ready sandboxes into `sandboxes` from a thread (the kubernetes
    client is synchronous); `foreign` names the slices left out and why."""

    def __init__(self, pool: str, namespace: str, api: Any = None) -> None:
        self.pool, self.namespace = pool, namespace
        self.api = api
        self.sandboxes = Sandboxes(follows=True)
        self.foreign: dict[str, str] = {}
        self.uid = ""
        self._slices: dict[str, set[str]] = {}
        self._services: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None  # why the first list failed

    async def start(self) -> None:
        """Read the pool (LookupError when it cannot be read) and its sandboxes; return once the
        first list is in `sandboxes`, then follow them until stop()."""
        from kubernetes import client

        self.api = self.api or await asyncio.to_thread(api_client)
        self._core = client.CoreV1Api(self.api)
        self._slices_api = client.DiscoveryV1Api(self.api)
        try:
            obj = await asyncio.to_thread(
                client.CustomObjectsApi(self.api).get_namespaced_custom_object,
                GROUP, VERSION, self.namespace, SANDBOXPOOL_PLURAL, self.pool,
            )  # fmt: skip
        except client.ApiException as err:
            raise LookupError(
                f"SandboxPool {self.namespace}/{self.pool}: HTTP {err.status} {err.reason}"
            ) from None
        self.uid = obj["metadata"]["uid"]
        loop = asyncio.get_running_loop()
        first = threading.Event()

        def publish() -> None:
            urls = set().union(*self._slices.values())
            loop.call_soon_threadsafe(self.sandboxes.set_ready, urls)
            first.set()

        def failed(err: Exception) -> None:
            self._error = err
            first.set()

        self._thread = threading.Thread(
            target=self._run, args=(publish, failed), name=f"watch-{self.pool}", daemon=True
        )
        self._thread.start()
        if not await asyncio.to_thread(first.wait, 60) or self._error is not None:
            await self.stop()
            why = self._error or "no list in 60 s"
            raise LookupError(f"SandboxPool {self.namespace}/{self.pool}: {why}")
        await asyncio.sleep(0)  # let the first set_ready run before the caller reads the set

    async def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 15)
            self._thread = None

    async def __aenter__(self) -> PoolWatch:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _run(self, publish: Callable[[], None], failed: Callable[[Exception], None]) -> None:
        from kubernetes.client.exceptions import ApiException

        version, listed = "", False
        while not self._stop.is_set():
            try:
                if not version:
                    try:
                        version = self._list()
                    except Exception as err:
                        if not listed:  # the first list: start() reports it and stops
                            failed(err)
                            return
                        raise
                    listed = True
                    publish()
                version = self._watch(version, publish)
            except ApiException as err:
                if err.status == 410:  # too old to resume from: list again
                    version = ""
                    continue
                log.warning("pool %s: %s; retrying", self.pool, err)
                self._stop.wait(2.0)
            except Exception as err:  # a broken stream, the network: keep the set, resume
                log.warning("pool %s: %r; retrying", self.pool, err)
                self._stop.wait(2.0)

    def _list(self) -> str:
        selector = f"{POOL_LABEL}={self.pool}"
        services = self._core.list_namespaced_service(self.namespace, label_selector=selector)
        self._services = {s.metadata.name: s for s in services.items}
        resp = self._slices_api.list_namespaced_endpoint_slice(
            self.namespace, label_selector=selector, _preload_content=False, _request_timeout=60
        )
        body = json.loads(resp.data)
        self._slices = {}
        for item in body.get("items") or []:
            obj = _Obj(item)
            self._slices[obj.metadata.name] = self._urls(obj)
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, version: str, publish: Callable[[], None]) -> str:
        """One watch request from `version`; the last version seen ('' after 410 Gone)."""
        from kubernetes.client.exceptions import ApiException

        resp = self._slices_api.list_namespaced_endpoint_slice(
            self.namespace, label_selector=f"{POOL_LABEL}={self.pool}", watch=True,
            resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=5,  # bounds how long stop() waits for this thread
            _preload_content=False, _request_timeout=(10, 30),
        )  # fmt: skip
        try:
            for line in resp:  # one JSON event a line
                if not line.strip():
                    continue
                event = json.loads(line)
                data = event["object"]
                if event["type"] == "ERROR":
                    if data.get("code") == 410:
                        return ""
                    raise ApiException(status=data.get("code"), reason=data.get("message"))
                version = data["metadata"].get("resourceVersion") or version
                if event["type"] == "BOOKMARK":
                    continue
                obj = _Obj(data)
                if event["type"] == "DELETED":
                    self._slices.pop(obj.metadata.name, None)
                    self.foreign.pop(obj.metadata.name, None)
                else:
                    self._slices[obj.metadata.name] = self._urls(obj)
                publish()
                if self._stop.is_set():
                    break
        finally:
            resp.release_conn()
        return version

    def _urls(self, endpoint_slice: Any) -> set[str]:
        """slice_urls of a slice of one of the pool's own Services; none of any other."""
        name = endpoint_slice.metadata.name
        why = self._foreign(endpoint_slice)
        if why:
            if self.foreign.get(name) != why:
                log.warning("pool %s: EndpointSlice %s ignored: %s", self.pool, name, why)
            self.foreign[name] = why
            return set()
        self.foreign.pop(name, None)
        return slice_urls(endpoint_slice)

    def _foreign(self, endpoint_slice: Any) -> str:
        """'' when the slice is one of the pool's own Services', else why not (slice_problem)."""
        return slice_problem(
            endpoint_slice, self.pool, self.uid, self._services.get, self._read_service
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
