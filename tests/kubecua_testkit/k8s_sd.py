"""Kubernetes service discovery for Debian's Prometheus, which is built without it.

prometheus-operator generates a Prometheus configuration whose jobs discover targets with
`kubernetes_sd_configs` and choose among them with `relabel_configs` (the monitors' selectors,
namespaces and port names become `keep` rules on `__meta_kubernetes_*` labels). Debian's
Prometheus refuses `kubernetes_sd_configs`, so `rewrite()` replaces each one with a file_sd
file, and `Bridge` keeps those files filled with what kubernetes_sd would return: every
EndpointSlice or Pod of the listed namespaces, with the same `__meta_kubernetes_*` labels
(Prometheus's documented names). No selection happens here: the operator's relabel rules, run by
Prometheus, do all of it. Roles other than endpointslice and pod are refused.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from kubernetes import client

Obj = dict[str, Any]
META = "__meta_kubernetes_"


def sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _labels(prefix: str, labels: dict[str, str] | None) -> dict[str, str]:
    out = {}
    for k, v in (labels or {}).items():
        out[f"{META}{prefix}_label_{sanitize(k)}"] = v
        out[f"{META}{prefix}_labelpresent_{sanitize(k)}"] = "true"
    return out


def rewrite(config: Obj, target_dir: Path) -> list[tuple[Path, Obj]]:
    """Swap each kubernetes_sd_configs entry of `config` for a file_sd file (in place); returns
    (file, the kubernetes_sd entry) pairs for Bridge."""
    found = []
    for job in config.get("scrape_configs") or []:
        sds = job.pop("kubernetes_sd_configs", None)
        if not sds:
            continue
        files = []
        for i, sd in enumerate(sds):
            if sd.get("role") not in ("endpointslice", "pod"):
                raise ValueError(
                    f"{job['job_name']}: kubernetes_sd role {sd.get('role')} is not bridged"
                )
            if unknown := set(sd) - {"role", "namespaces", "kubeconfig_file", "api_server"}:
                raise ValueError(
                    f"{job['job_name']}: kubernetes_sd fields not bridged: {sorted(unknown)}"
                )
            path = target_dir / f"{sanitize(job['job_name'])}-{i}.json"
            files.append(str(path))
            found.append((path, sd))
        job["file_sd_configs"] = [{"files": files, "refresh_interval": "1s"}]
    return found


def pod_meta(pod: Obj) -> dict[str, str]:
    md, status = pod["metadata"], pod.get("status") or {}
    conds = status.get("conditions") or []
    meta = {
        f"{META}namespace": md["namespace"],
        f"{META}pod_name": md["name"],
        f"{META}pod_ip": status.get("podIP", ""),
        f"{META}pod_node_name": pod["spec"].get("nodeName", ""),
        f"{META}pod_host_ip": status.get("hostIP", ""),
        f"{META}pod_uid": md["uid"],
        f"{META}pod_phase": status.get("phase", ""),
        f"{META}pod_ready": str(
            any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        ).lower(),
        **_labels("pod", md.get("labels")),
    }
    for ref in md.get("ownerReferences") or []:
        if ref.get("controller"):
            meta[f"{META}pod_controller_kind"] = ref["kind"]
            meta[f"{META}pod_controller_name"] = ref["name"]
    return meta


def pod_groups(pods: list[Obj]) -> list[Obj]:
    """Role pod: one target per declared container port (one bare target for a portless pod)."""
    groups: list[Obj] = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            continue
        base = pod_meta(pod)
        ports = [(c, p) for c in pod["spec"]["containers"] for p in c.get("ports") or []]
        if not ports:
            groups.append({"targets": [ip], "labels": base})
        for container, port in ports:
            labels = {
                **base,
                f"{META}pod_container_name": container["name"],
                f"{META}pod_container_init": "false",
                f"{META}pod_container_port_name": port.get("name", ""),
                f"{META}pod_container_port_number": str(port["containerPort"]),
                f"{META}pod_container_port_protocol": port.get("protocol", "TCP"),
            }
            groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


def slice_groups(slices: list[Obj], services: dict[tuple[str, str], Obj],
                 pods: dict[tuple[str, str], Obj]) -> list[Obj]:  # fmt: skip
    """Role endpointslice: one target per address and port, with its Service's and Pod's labels."""
    groups: list[Obj] = []
    for sl in slices:
        md = sl["metadata"]
        ns = md["namespace"]
        base = {
            f"{META}namespace": ns,
            f"{META}endpointslice_name": md["name"],
            f"{META}endpointslice_address_type": sl["addressType"],
            **_labels("endpointslice", md.get("labels")),
        }
        svc = services.get((ns, (md.get("labels") or {}).get("kubernetes.io/service-name", "")))
        if svc is not None:
            base[f"{META}service_name"] = svc["metadata"]["name"]
            base.update(_labels("service", svc["metadata"].get("labels")))
        for ep in sl.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            labels = {
                **base,
                f"{META}endpointslice_endpoint_conditions_ready": str(
                    cond.get("ready") is not False
                ).lower(),
                f"{META}endpointslice_endpoint_conditions_serving": str(
                    cond.get("serving", cond.get("ready")) is not False
                ).lower(),
                f"{META}endpointslice_endpoint_conditions_terminating": str(
                    bool(cond.get("terminating"))
                ).lower(),
            }
            ref = ep.get("targetRef")
            if ref:
                labels[f"{META}endpointslice_address_target_kind"] = ref["kind"]
                labels[f"{META}endpointslice_address_target_name"] = ref["name"]
                pod = pods.get((ns, ref["name"])) if ref["kind"] == "Pod" else None
                if pod is not None:
                    labels.update(pod_meta(pod))
            if ep.get("nodeName"):
                labels[f"{META}endpointslice_endpoint_node_name"] = ep["nodeName"]
            for port in sl.get("ports") or []:
                port_labels = {
                    **labels,
                    f"{META}endpointslice_port": str(port["port"]),
                    f"{META}endpointslice_port_name": port.get("name", ""),
                    f"{META}endpointslice_port_protocol": port.get("protocol", "TCP"),
                }
                groups.extend({"targets": [f"{addr}:{port['port']}"], "labels": port_labels}
                              for addr in ep["addresses"])  # fmt: skip
    return groups


class Bridge:
    """Keeps the file_sd files of `rewrite()` filled from the API server, once a second."""

    def __init__(self, sds: list[tuple[Path, Obj]], api: client.ApiClient) -> None:
        self.sds, self.api = sds, api
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="k8s-sd")
        self.refresh()

    def _namespaces(self, sd: Obj) -> list[str] | None:
        names = (sd.get("namespaces") or {}).get("names")
        return list(names) if names else None  # None: every namespace

    def _list(self, prefix: str, plural: str, namespaces: list[str] | None) -> list[Obj]:
        """Raw JSON lists: the client's models refuse an EndpointSlice with no endpoints."""
        if namespaces is None:
            paths = [f"{prefix}/{plural}"]
        else:
            paths = [f"{prefix}/namespaces/{ns}/{plural}" for ns in namespaces]
        out: list[Obj] = []
        for path in paths:
            got = self.api.call_api(path, "GET", response_type="object",
                                    auth_settings=["BearerToken"],
                                    _return_http_data_only=True)  # fmt: skip
            out += got.get("items") or []
        return out

    def groups(self, sd: Obj) -> list[Obj]:
        namespaces = self._namespaces(sd)
        pods = self._list("/api/v1", "pods", namespaces)
        if sd["role"] == "pod":
            return pod_groups(pods)
        services = self._list("/api/v1", "services", namespaces)
        slices = self._list("/apis/discovery.k8s.io/v1", "endpointslices", namespaces)

        def key(o: Obj) -> tuple[str, str]:
            return o["metadata"]["namespace"], o["metadata"]["name"]

        return slice_groups(slices, {key(x): x for x in services}, {key(x): x for x in pods})

    def refresh(self) -> None:
        for path, sd in self.sds:
            text = json.dumps(self.groups(sd), sort_keys=True)
            if not path.exists() or path.read_text() != text:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(path)  # atomic: Prometheus never reads half a file

    def _run(self) -> None:
        while not self._stop.wait(1.0):  # kubernetes_sd would follow watches; 1 s is close
            try:
                self.refresh()
            except client.ApiException:
                continue  # the API hiccupped; the next round catches up

    def start(self) -> Bridge:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
