"""prometheus-operator, built from the Go module proxy (hack/build-cluster-addons.sh), run as a
local process against the real API server with the chart's ServiceMonitor, PodMonitor and
PrometheusRule. It turns a `Prometheus` object into a generated configuration (a Secret) and rule
files (a ConfigMap); Debian's Prometheus runs that configuration and those rules unchanged, except
that Debian builds it without kubernetes_sd: kubecua_testkit.k8s_sd swaps each kubernetes_sd
block for file_sd fed with the same `__meta_kubernetes_*` labels, and the operator's relabel rules
(run by Prometheus) choose the targets. The operator's StatefulSet for the Prometheus object is
left to kwok (no Prometheus runs from it).

Targets are real processes on the host's address (EndpointSlices refuse loopback): the kubecua
operator behind the chart's Service with a hand-made EndpointSlice (kwok runs no operator pod),
and an episode server behind a pod object whose status the test writes as a kubelet would. A
decoy pod the PodMonitor does not select points at the same server and must not be scraped.
"""

from __future__ import annotations

import base64
import gzip
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kubecua_testkit import k8s_sd
from kubecua_testkit.components import free_port, start_in_group, stop_group
from kubecua_testkit.kueue import module_dir, wait_established
from kubecua_testkit.node import node_ip
from kubecua_testkit.tools import REPO, binary, run

NS = f"kc-promop-{os.getpid()}"
RELEASE = "kubecua"
SERVICE = f"{RELEASE}-operator"  # the chart's Service; the ServiceMonitor's job label
POD_MONITOR = f"{RELEASE}-sandboxes"
OPERATOR_PY = REPO / "operator/.venv/bin/python"
EPISODE_PY = REPO / "sandbox-image/episode-server/.venv/bin/python"
PROMETHEUS = Path("/usr/bin/prometheus")
CHART_VALUES = [
    "serviceMonitor.enabled=true", "serviceMonitor.interval=1s",
    "podMonitor.enabled=true", "podMonitor.interval=1s",
    "prometheusRule.enabled=true", "prometheusRule.operatorDownFor=3s",
]  # fmt: skip


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)  # the API and Prometheus are polled: neither pushes
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def chart_monitors() -> str:
    args: list[Any] = [binary("helm"), "template", RELEASE, REPO / "charts/kubecua", "-n", NS]
    for t in ("service", "servicemonitor", "podmonitor", "prometheusrule"):
        args += ["--show-only", f"templates/{t}.yaml"]
    for v in CHART_VALUES:
        args += ["--set", v]
    return str(run(args).stdout)


def prometheus_object() -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "kubecua", "namespace": NS},
        "spec": {
            "version": "v2.42.0",  # Debian's: the operator writes only what that version parses
            "serviceDiscoveryRole": "EndpointSlice",
            "scrapeInterval": "1s",
            "evaluationInterval": "1s",
            "serviceMonitorSelector": {},
            "podMonitorSelector": {},
            "ruleSelector": {},
        },
    }


def pod(name: str, component: str, ip: str, port: int) -> tuple[dict, dict]:
    """A pod object that no node fits (never bound: kwok leaves it, and the pod GC keeps it)
    and the status a kubelet would write."""
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {
            "app.kubernetes.io/managed-by": "kubecua-operator",
            "app.kubernetes.io/component": component, "kubecua.dev/pool": "desks"}},
        "spec": {"nodeSelector": {"kubecua.dev/no-such-node": "true"}, "containers": [{
            "name": "episode-server", "image": "localhost/kubecua/sandbox:test",
            "ports": [{"name": "episodes", "containerPort": port}]}]},
    }  # fmt: skip
    ready = [{"type": t, "status": "True"} for t in ("PodScheduled", "Ready", "ContainersReady")]
    status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip,
              "conditions": ready}  # fmt: skip
    return body, status


def operator_slice(ip: str, port: int) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{SERVICE}-local", "namespace": NS, "labels": {
            "kubernetes.io/service-name": SERVICE,
            "endpointslice.kubernetes.io/managed-by": "kubecua-tests"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": "metrics", "port": port, "protocol": "TCP"}],
    }  # fmt: skip


def generated(cluster: Any) -> tuple[dict, dict[str, str]] | None:
    """The operator's config (from its Secret) and rule files (from its ConfigMap), once both
    monitors' jobs are in it."""
    got = cluster.kubectl("get", "secret", "-n", NS, "prometheus-kubecua", "-o", "yaml",
                          check=False)  # fmt: skip
    if got.returncode != 0:
        return None
    data = yaml.safe_load(got.stdout)["data"]["prometheus.yaml.gz"]
    config = yaml.safe_load(gzip.decompress(base64.b64decode(data)))
    jobs = {j["job_name"] for j in config.get("scrape_configs") or []}
    want = {f"serviceMonitor/{NS}/{SERVICE}/0", f"podMonitor/{NS}/{POD_MONITOR}/0"}
    rules = cluster.kubectl("get", "configmap", "-n", NS, "prometheus-kubecua-rulefiles-0",
                            "-o", "yaml", check=False)  # fmt: skip
    if not want <= jobs or rules.returncode != 0:
        return None
    return config, yaml.safe_load(rules.stdout)["data"]


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory) -> Iterator[dict]:
    for path, how in [(OPERATOR_PY, "make operator-env"), (EPISODE_PY, "make sandbox-env"),
                      (PROMETHEUS, "make setup-apt installs Debian's prometheus")]:  # fmt: skip
        if not path.exists():
            pytest.skip(f"{path} is missing: {how}")
    tmp = tmp_path_factory.mktemp("promop")
    ip = node_ip()
    source = module_dir("github.com/prometheus-operator/prometheus-operator",
                        "PROMETHEUS_OPERATOR_VERSION")  # fmt: skip
    crds = source / "example" / "prometheus-operator-crd"
    with ExitStack() as stack:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
        wait_established(
            cluster,
            [
                f"{kind}.monitoring.coreos.com"
                for kind in ("prometheuses", "servicemonitors", "podmonitors", "prometheusrules")
            ],
        )
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        cluster.kubectl("create", "namespace", NS)
        stack.callback(cluster.kubectl, "delete", "namespace", NS, "--wait=false", check=False)
        started = time.monotonic()
        web = free_port()
        promop = start_in_group(stack, [
            binary("prometheus-operator"), f"--namespaces={NS}",
            f"--web.listen-address=127.0.0.1:{web}",
        ], tmp / "prometheus-operator.log", {"KUBECONFIG": str(cluster.kubeconfig)})  # fmt: skip
        wait_for(lambda: promop.poll() is None and answers(f"http://127.0.0.1:{web}/healthz"),
                 60, "prometheus-operator up")  # fmt: skip

        # The targets: the kubecua operator and an episode server, on the host's address.
        op_port, health = free_port(), free_port()
        env = {"KUBECONFIG": str(cluster.kubeconfig), "KUBECUA_OPERATOR_METRICS_PORT": str(op_port),
               "KUBECUA_OPERATOR_METRICS_HOST": ip}  # fmt: skip
        operator = start_in_group(stack, [OPERATOR_PY, "-m", "kubecua_operator", "--namespace", NS,
                                 f"--liveness=http://127.0.0.1:{health}/healthz"],
                         tmp / "operator.log", env)  # fmt: skip
        (tmp / "token").write_text(os.urandom(16).hex())
        ep_port = free_port()
        episodes = start_in_group(stack, [EPISODE_PY, "-m", "kubecua_episode", "--host", ip,
                                 "--port", ep_port], tmp / "episode-server.log",
                         {"KUBECUA_SANDBOX_TOKEN_FILE": str(tmp / "token")})  # fmt: skip
        wait_for(lambda: answers(f"http://{ip}:{op_port}/metrics"), 90, "operator metrics")
        wait_for(lambda: answers(f"http://{ip}:{ep_port}/metrics"), 120, "episode metrics")

        cluster.kubectl("apply", "-n", NS, "-f", "-", input=chart_monitors())
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(operator_slice(ip, op_port)))
        for name, component in (("desk-0", "sandbox"), ("decoy-0", "decoy")):
            body, status = pod(name, component, ip, ep_port)
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
            cluster.kubectl("patch", "pod", name, "-n", NS, "--subresource=status",
                            "--type=merge", "-p", yaml.safe_dump({"status": status}))  # fmt: skip
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(prometheus_object()))

        config, rule_files = wait_for(lambda: generated(cluster), 90, "the generated config")
        # What the config-reloader sidecar does before Prometheus reads it: expand the pod's
        # $(POD_NAME) and $(SHARD) (one unsharded replica here).
        text = yaml.safe_dump(config).replace("$(SHARD)", "0")
        config = yaml.safe_load(text.replace("$(POD_NAME)", "prometheus-kubecua-0"))
        (tmp / "generated.yaml").write_text(yaml.safe_dump(config))  # kept for reading failures
        rules_dir = tmp / "rules"
        rules_dir.mkdir()
        for name, text in rule_files.items():
            (rules_dir / name).write_text(text)
        config["rule_files"] = [str(rules_dir / "*.yaml")]
        sd_dir = tmp / "sd"
        sd_dir.mkdir()
        bridge = k8s_sd.Bridge(k8s_sd.rewrite(config, sd_dir), cluster.api_client()).start()
        stack.callback(bridge.stop)
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        prom = start_in_group(stack, [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                     tmp / "prometheus.log")  # fmt: skip
        api = f"http://127.0.0.1:{port}"
        wait_for(lambda: prom.poll() is None and answers(f"{api}/-/ready"), 60, "prometheus")
        yield {"api": api, "ip": ip, "ports": {"operator": op_port, "episodes": ep_port},
               "operator": operator, "episodes": episodes, "tmp": tmp,
               "setup_seconds": time.monotonic() - started}  # fmt: skip


def targets(api: str) -> dict:
    return httpx.get(f"{api}/api/v1/targets", timeout=10).json()["data"]


def alerts(api: str) -> dict[str, str]:
    found = httpx.get(f"{api}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return {a["labels"]["alertname"]: a["state"] for a in found}


def test_the_monitors_alone_choose_the_targets_and_both_are_scraped(stack):
    ip, ports = stack["ip"], stack["ports"]

    def scraped() -> dict | None:
        active = {t["scrapePool"]: t for t in targets(stack["api"])["activeTargets"]}
        up = all(t["health"] == "up" for t in active.values())
        return active if len(active) == 2 and up else None

    active = wait_for(scraped, 60, "two healthy targets")
    op = active[f"serviceMonitor/{NS}/{SERVICE}/0"]
    assert op["scrapeUrl"] == f"http://{ip}:{ports['operator']}/metrics"
    assert op["labels"]["job"] == SERVICE
    assert op["labels"]["namespace"] == NS
    assert op["labels"]["endpoint"] == "metrics"
    desk = active[f"podMonitor/{NS}/{POD_MONITOR}/0"]
    assert desk["scrapeUrl"] == f"http://{ip}:{ports['episodes']}/metrics"
    assert desk["labels"]["pod"] == "desk-0"
    assert desk["labels"]["kubecua_dev_pool"] == "desks"  # the PodMonitor's podTargetLabels
    # The decoy serves the same metrics but its component is not selected: relabelled away.
    dropped = targets(stack["api"])["droppedTargets"]
    assert any(
        t["discoveredLabels"].get("__meta_kubernetes_pod_name") == "decoy-0" for t in dropped
    )
    assert all(t["labels"].get("pod") != "decoy-0" for t in active.values())
    # Samples the targets themselves exported (not Prometheus's own up and scrape_* series).
    for job in (SERVICE, f"{NS}/{POD_MONITOR}"):
        match = f'{{job="{job}", __name__!~"up|scrape_.+"}}'
        got = httpx.get(f"{stack['api']}/api/v1/series", params={"match[]": match}, timeout=10)
        assert got.json()["data"], f"no series scraped from {job}"
    # The episode server's own gauge, through the PodMonitor's labels: 0, it has no desktop.
    ready = f'kubecua_sandbox_ready{{job="{NS}/{POD_MONITOR}", pod="desk-0"}}'
    got = httpx.get(f"{stack['api']}/api/v1/query", params={"query": ready}, timeout=10)
    assert [r["value"][1] for r in got.json()["data"]["result"]] == ["0"]


def test_the_charts_rules_load_and_operator_down_fires_when_its_target_goes(stack):
    rules = httpx.get(f"{stack['api']}/api/v1/rules", timeout=10).json()["data"]["groups"]
    names = {r["name"] for g in rules for r in g["rules"]}
    assert {"KubecuaOperatorDown", "KubecuaPoolDegraded", "KubecuaTrainingRunStalled"} <= names
    # every group comes from the operator's rule-file ConfigMap, written out as it was
    assert {Path(g["file"]).parent for g in rules} == {stack["tmp"] / "rules"}
    wait_for(lambda: any(t["health"] == "up" for t in targets(stack["api"])["activeTargets"]
                         if t["labels"].get("job") == SERVICE), 60, "operator scraped")  # fmt: skip
    # It fired while Prometheus had not yet scraped the operator; it resolves once it has.
    wait_for(lambda: "KubecuaOperatorDown" not in alerts(stack["api"]), 30, "no alert while up")
    stop_group(stack["operator"])  # its metrics endpoint goes with it
    wait_for(lambda: alerts(stack["api"]).get("KubecuaOperatorDown") == "firing", 60,
             "KubecuaOperatorDown firing")  # fmt: skip
