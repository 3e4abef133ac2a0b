"""The chart's ServiceMonitor and PodMonitor turned into Prometheus scrape targets, as the
Prometheus Operator would: their selectors and port names pick targets from the real API server.

Debian's Prometheus is built without Kubernetes service discovery, so the discovery half runs
here: `Discovery` lists the selected pods and EndpointSlices and writes them as file_sd target
files, which Prometheus re-reads when they change. Only the fields the chart uses are translated
(matchLabels, matchExpressions In, namespaceSelector, port, path, honorLabels, podTargetLabels);
anything else is refused, so a chart change cannot be silently ignored.

To retire: prometheus-operator now does this job for real (kubecua_testkit.k8s_sd feeds its
generated configuration; docs/cluster-integrations.md). Only
tests/e2e/test_real_node_user_journey.py still uses this module; once it runs the real operator
too, delete it.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from kubernetes import client

Obj = dict[str, Any]
KNOWN_SPEC = {"selector", "namespaceSelector", "endpoints", "podMetricsEndpoints",
              "podTargetLabels"}  # fmt: skip
KNOWN_ENDPOINT = {"port", "path", "interval", "honorLabels"}


def _sanitize(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def label_selector(selector: Obj) -> str:
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        if expr["operator"] != "In":
            raise ValueError(f"matchExpressions operator {expr['operator']} is not translated")
        parts.append(f"{expr['key']} in ({','.join(expr['values'])})")
    return ",".join(parts)


def _check(mon: Obj) -> None:
    spec = mon["spec"]
    if unknown := set(spec) - KNOWN_SPEC:
        raise ValueError(f"{mon['kind']} fields not translated: {sorted(unknown)}")
    for ep in spec.get("endpoints") or spec.get("podMetricsEndpoints") or []:
        if unknown := set(ep) - KNOWN_ENDPOINT:
            raise ValueError(f"{mon['kind']} endpoint fields not translated: {sorted(unknown)}")


def job_name(mon: Obj, index: int) -> str:
    kind = "serviceMonitor" if mon["kind"] == "ServiceMonitor" else "podMonitor"
    return f"{kind}/{mon['metadata']['namespace']}/{mon['metadata']['name']}/{index}"


def scrape_configs(monitors: list[Obj], target_dir: Path, interval: str = "1s") -> list[Obj]:
    """One file_sd job per monitor endpoint; `interval` replaces the monitors' own."""
    jobs = []
    for mon in monitors:
        _check(mon)
        spec = mon["spec"]
        for i, ep in enumerate(spec.get("endpoints") or spec.get("podMetricsEndpoints") or []):
            name = job_name(mon, i)
            jobs.append({
                "job_name": name,
                "scrape_interval": interval,
                "metrics_path": ep.get("path", "/metrics"),
                "honor_labels": bool(ep.get("honorLabels", False)),
                "file_sd_configs": [{"files": [str(target_dir / f"{_sanitize(name)}.json")]}],
            })  # fmt: skip
    return jobs


def targets(mon: Obj, api: client.ApiClient) -> dict[str, list[Obj]]:
    """Current file_sd groups of each job of one monitor."""
    spec, own_ns = mon["spec"], mon["metadata"]["namespace"]
    ns_sel = spec.get("namespaceSelector") or {}
    namespaces = None if ns_sel.get("any") else (ns_sel.get("matchNames") or [own_ns])
    selector = label_selector(spec["selector"])
    out: dict[str, list[Obj]] = {}
    core = client.CoreV1Api(api)
    if mon["kind"] == "PodMonitor":
        pods = _list(core.list_namespaced_pod, core.list_pod_for_all_namespaces, namespaces,
                     selector)  # fmt: skip
        for i, ep in enumerate(spec["podMetricsEndpoints"]):
            groups = []
            for pod in pods:
                if pod.status.phase != "Running" or not pod.status.pod_ip:
                    continue
                ports = [p for c in pod.spec.containers for p in c.ports or []]
                port = next((p.container_port for p in ports if p.name == ep["port"]), None)
                if port is None:
                    continue
                labels = {"namespace": pod.metadata.namespace, "pod": pod.metadata.name}
                for key in spec.get("podTargetLabels") or []:
                    if key in (pod.metadata.labels or {}):
                        labels[_sanitize(key)] = pod.metadata.labels[key]
                groups.append({"targets": [f"{pod.status.pod_ip}:{port}"], "labels": labels})
            out[job_name(mon, i)] = groups
        return out
    services = _list(core.list_namespaced_service, core.list_service_for_all_namespaces,
                     namespaces, selector)  # fmt: skip
    discovery = client.DiscoveryV1Api(api)
    for i, ep in enumerate(spec["endpoints"]):
        groups = []
        for svc in services:
            slices = discovery.list_namespaced_endpoint_slice(
                svc.metadata.namespace,
                label_selector=f"kubernetes.io/service-name={svc.metadata.name}",
            ).items
            for sl in slices:
                port = next((p.port for p in sl.ports or [] if p.name == ep["port"]), None)
                for e in sl.endpoints or [] if port else []:
                    if e.conditions is not None and e.conditions.ready is False:
                        continue
                    pod = e.target_ref.name if e.target_ref else ""
                    labels = {"namespace": svc.metadata.namespace, "service": svc.metadata.name,
                              "pod": pod}  # fmt: skip
                    groups.extend({"targets": [f"{a}:{port}"], "labels": labels}
                                  for a in e.addresses)  # fmt: skip
        out[job_name(mon, i)] = groups
    return out


def _list(namespaced, everywhere, namespaces: list[str] | None, selector: str) -> list:
    if namespaces is None:
        return list(everywhere(label_selector=selector).items)
    return [o for ns in namespaces for o in namespaced(ns, label_selector=selector).items]


class Discovery:
    """Keeps the file_sd target files in step with the cluster, once a second, until stop()."""

    def __init__(self, monitors: list[Obj], api: client.ApiClient, target_dir: Path) -> None:
        self.monitors, self.api, self.dir = monitors, api, target_dir
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="monitors")
        self.refresh()

    def refresh(self) -> None:
        for mon in self.monitors:
            for job, groups in targets(mon, self.api).items():
                path = self.dir / f"{_sanitize(job)}.json"
                text = json.dumps(groups, sort_keys=True)
                if not path.exists() or path.read_text() != text:
                    tmp = path.with_suffix(".tmp")
                    tmp.write_text(text)
                    tmp.replace(path)  # atomic: Prometheus never reads half a file

    def _run(self) -> None:
        while not self._stop.wait(1.0):  # as often as the test's scrape interval
            try:
                self.refresh()
            except client.ApiException:
                continue  # the API hiccupped; the next round catches up

    def start(self) -> Discovery:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
