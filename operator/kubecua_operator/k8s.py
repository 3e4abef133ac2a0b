"""Kubernetes API access in one place: REST paths per kind, and 404/409 handled here.

Every call goes through `Kube.request`, which counts requests by verb for /metrics and the bench.
Calls are blocking (the kubernetes client); async code runs them through `call`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import kopf
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from kubecua_operator import names
from kubecua_operator.apihealth import HEALTH
from kubecua_operator.metrics import API_REQUESTS

log = logging.getLogger(__name__)
Obj = dict[str, Any]
T = TypeVar("T")

# kind -> (API prefix, plural). Our children and the kinds we watch.
KINDS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "Secret": ("/api/v1", "secrets"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Event": ("/api/v1", "events"),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "Job": ("/apis/batch/v1", "jobs"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "VirtualMachine": ("/apis/kubevirt.io/v1", "virtualmachines"),
    "PodMonitor": ("/apis/monitoring.coreos.com/v1", "podmonitors"),
    "Workload": ("/apis/kueue.x-k8s.io/v1beta2", "workloads"),  # Kueue's, for queued runs
    "SandboxPool": ("/apis/kubecua.dev/v1alpha1", "sandboxpools"),
    "TrainingRun": ("/apis/kubecua.dev/v1alpha1", "trainingruns"),
    "TaskVerification": ("/apis/kubecua.dev/v1alpha1", "taskverifications"),
}
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the client sends the dict as JSON
MANAGER = "kubecua-operator"  # the field manager of everything apply() writes


class Kube:
    """A thin, thread-safe REST helper over kubernetes.client.ApiClient."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def path(self, kind: str, namespace: str, name: str = "", sub: str = "") -> str:
        prefix, plural = KINDS[kind]
        parts = [prefix, "namespaces", namespace, plural, name, sub]
        return "/".join(p.strip("/") for p in parts if p).join(["/", ""])

    def request(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        API_REQUESTS.labels(method.lower()).inc()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = ctype or "application/json"
        try:
            out = self.api.call_api(
                path, method, header_params=headers, body=body, response_type="object",
                auth_settings=["BearerToken"], _return_http_data_only=True, _request_timeout=30,
            )  # fmt: skip
        except ApiException as err:
            # 5xx and status 0 (no HTTP answer) mean the API is down or restarting.
            if err.status in (0, None) or err.status >= 500:
                HEALTH.failed()
            elif err.status == 403:
                HEALTH.denied(str(err.body or ""))
            else:
                HEALTH.ok()
            raise
        except (HTTPError, OSError):
            HEALTH.failed()
            raise
        HEALTH.ok()
        return out

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return self.request("GET", self.path(kind, namespace, name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str, selector: str = "", fields: str = "") -> list[Obj]:
        """`selector`: a label selector; `fields`: a field selector (e.g. metadata.name=x, a read
        of one object where RBAC grants list but not get)."""
        params = []
        if selector:
            params.append(f"labelSelector={selector}")
        if fields:
            params.append(f"fieldSelector={fields}")
        query = "?" + "&".join(params) if params else ""
        out = self.request("GET", self.path(kind, namespace) + query)
        return list(out.get("items", []))

    def create(self, obj: Obj) -> bool:
        """Create; True if made, False if it already existed (409): deterministic names."""
        meta = obj["metadata"]
        try:
            self.request("POST", self.path(obj["kind"], meta["namespace"]), obj)
            return True
        except ApiException as err:
            if err.status == 409:
                return False
            raise

    def patch(self, kind: str, namespace: str, name: str, patch: Obj, sub: str = "") -> Obj | None:
        """JSON merge patch; None when the object is gone (404)."""
        try:
            path = self.path(kind, namespace, name, sub)
            return self.request("PATCH", path, patch, MERGE)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def delete(self, kind: str, namespace: str, name: str, uid: str = "") -> bool:
        """Delete (background propagation); a uid precondition never deletes a newer namesake."""
        body: Obj = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", self.path(kind, namespace, name), body)
            return True
        except ApiException as err:
            if err.status in (404, 409):
                return False
            raise

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply as field manager `kubecua-operator`: creates `obj`, or puts back
        every field it sets (force: whoever changed one since loses it); fields it does not set
        are left to their own managers. A no-op when nothing differs (no new resourceVersion)."""
        meta = obj["metadata"]
        path = self.path(obj["kind"], meta["namespace"], meta["name"])
        return self.request("PATCH", f"{path}?fieldManager={MANAGER}&force=true", obj, APPLY)

    def has_resource(self, group_version: str, plural: str) -> bool:
        """Whether the API serves `plural` in `group_version` (e.g. a CRD is installed)."""
        try:
            out = self.request("GET", f"/apis/{group_version}")
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in out.get("resources", []))


async def call(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call (a Kube method, events.post, ...) in the default executor's threads,
    so a loop never blocks the others while the API answers."""
    return await asyncio.to_thread(fn, *args)


def adopt(obj: Obj, owner: Any) -> Obj:
    """Owner reference to `owner`, and the owner's labels except reserved keys, in place.

    Not kopf.adopt: that copies every label of the owner, so a user could label a pool
    `kubecua.dev/client-of-<victim>` and its pods would pass another pool's NetworkPolicy.
    blockOwnerDeletion stays off: setting it needs `update` on the owner's finalizers, a verb
    the operator does not otherwise need (it only matters to foreground deletion)."""
    kopf.append_owner_reference(obj, owner=owner, block_owner_deletion=False)
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    for key, value in names.user_labels(owner["metadata"].get("labels")).items():
        labels.setdefault(key, value)
    return obj


def controller_uid(obj: Obj) -> str:
    """The uid of the object's controlling owner, '' when it has none."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((r.get("uid", "") for r in refs if r.get("controller")), "")


_lock = threading.Lock()
_kube: Kube | None = None


def kube() -> Kube:
    """The process-wide client: in-cluster config, or the kubeconfig named by KUBECONFIG."""
    global _kube
    with _lock:
        if _kube is None:
            cfg = client.Configuration()
            try:
                config.load_incluster_config(client_configuration=cfg)
            except config.ConfigException:
                config.load_kube_config(client_configuration=cfg)
            cfg.connection_pool_maxsize = 64
            _kube = Kube(client.ApiClient(cfg))
        return _kube
