"""Issue 42 on the real API server: every count a user sets has a maximum, and the invalid
combinations that got past the schema (found by thinking them through and by the spec fuzz,
tests/test_spec_fuzz.py) are refused, each naming its field path as `kubectl apply` prints it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .test_crd_validation import POOL, RUN, with_spec

URLS = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
STATIC = {"urls": URLS}
EXTERNAL = {"backend": "external", "desktop": {"external": {"endpoints": URLS}}}


def pool(**spec: Any) -> dict:
    return with_spec(POOL, **spec)


def run(**spec: Any) -> dict:
    return with_spec(RUN, **spec)


def egress(**peer: Any) -> dict:
    return pool(egress=[{"to": [peer]}])


BOUNDS = [  # the maximum of each count, named with its path and value
    (run(trainer={"nodes": 1_000_000}), "spec.trainer.nodes: Invalid value: 1000000: "
     "spec.trainer.nodes in body should be less than or equal to 1024"),
    (run(trainer={"gpusPerNode": 17}), "spec.trainer.gpusPerNode in body should be less than or"),
    (run(algorithm={"tasksPerStep": 1025}), "spec.algorithm.tasksPerStep in body should be less"),
    (run(steps=1_000_001), "spec.steps in body should be less than or equal to 1000000"),
    (run(sandboxes={"poolRef": "p", "minReady": 10001}), "spec.sandboxes.minReady in body should"),
    (run(rollout={"maxInFlightEpisodes": 10001}), "spec.rollout.maxInFlightEpisodes in body"),
    (run(algorithm={"maxNewTokens": 32769}), "spec.algorithm.maxNewTokens in body should be less"),
    (run(backoffLimit=1001), "spec.backoffLimit in body should be less than or equal to 1000"),
    (run(seed=-1), "spec.seed in body should be greater than or equal to 0"),
    (run(tasks={"configMapRef": "t", "ids": []}), "spec.tasks.ids: Invalid value: 0: "
     "spec.tasks.ids in body should have at least 1 items"),
    (pool(replicas=10001), "spec.replicas in body should be less than or equal to 10000"),
    (pool(reset={"maxEpisodesPerSandbox": 1_000_001}), "spec.reset.maxEpisodesPerSandbox in"),
]  # fmt: skip

GAPS = [  # cross-field and shape rules, each naming its field
    (run(sandboxes={**STATIC, "minReady": 3}), "spec.sandboxes.minReady: Invalid value"),
    (run(sandboxes={"local": {"replicas": 2}, "minReady": 3}), "spec.sandboxes.minReady:"),
    (run(warmup={"demonstrations": "/d", "epochs": 5, "stopWhen": {"everyEpochs": 5}}),
     "spec.warmup.stopWhen.everyEpochs: Invalid value"),
    (run(rollout={"sglangUrls": ["http://s:30000"]}), "spec.rollout.sglangUrls: Invalid value"),
    (run(rollout={"replicas": 2}), "spec.rollout.replicas: Invalid value"),
    (run(algorithm={"turnDiscount": 0.9}), "spec.algorithm.turnDiscount: Invalid value"),
    (run(model={"path": "tiny", "volume": "models"}), "spec.model.path: Invalid value"),
    (run(model={"path": "/tiny", "volume": "models"}), "spec.model.path: Invalid value"),
    (run(checkpoint={"path": "/"}), "spec.checkpoint.path: Invalid value"),
    (run(checkpoint={"path": "/proc/ckpt"}), "spec.checkpoint.path: Invalid value"),
    (run(kueue={"queueName": ""}), "spec.kueue.queueName"),
    (run(metrics={"port": 29500}), "spec.metrics.port: Invalid value"),
    (run(sandboxes={"urls": [URLS[0], URLS[0]]}), "spec.sandboxes.urls[1]: Duplicate value"),
    # found by the spec fuzz: an EndpointSlice refuses a one-label FQDN (and upper case)
    (pool(backend="external", desktop={"external": {"endpoints": ["http://desk-1:8000"]}}),
     "spec.desktop.external.endpoints[0]: Invalid value"),
    (pool(backend="external", desktop={"external": {"endpoints": ["http://Desk.lab:8000"]}}),
     "spec.desktop.external.endpoints[0]: Invalid value"),
    (pool(backend="external", desktop={"external": {"endpoints": ["http://localhost:8000"]}}),
     "spec.desktop.external.endpoints[0]: Invalid value"),
    (egress(), "spec.egress[0].to[0]: Invalid value"),  # a peer of nothing
    (egress(ipBlock={"cidr": "10.0.0.0/8"}, podSelector={}), "a peer with an ipBlock takes no"),
    (pool(egress=[{"ports": [{"port": "0"}]}]), "spec.egress[0].ports[0].port: Invalid value"),
    (pool(egress=[{"ports": [{"port": "a--b"}]}]), "spec.egress[0].ports[0].port: Invalid value"),
    (pool(replicas=10000, warmSpares=1), "spec.warmSpares: Invalid value"),
    (pool(replicas=1, maxReplicas=10000, warmSpares=1), "spec.warmSpares: Invalid value"),
    (pool(backend="external", desktop={"external": {"endpoints": [URLS[0], URLS[0]]}}),
     "spec.desktop.external.endpoints[1]: Duplicate value"),
    (pool(desktop={"pod": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}}),
     "spec.desktop.pod.tolerations[0]: Invalid value"),
    (pool(desktop={"pod": {"tolerations": [{"key": "k", "tolerationSeconds": 5}]}}),
     "tolerationSeconds needs effect NoExecute"),
    (pool(desktop={"pod": {"tolerations": [{"value": "v"}]}}),
     "a toleration without a key must have operator Exists"),
    (pool(desktop={"pod": {"nodeSelector": {"bad key": "x"}}}),
     "spec.desktop.pod.nodeSelector: Invalid value"),
    (pool(desktop={"pod": {"nodeSelector": {"disk": "not a label"}}}),
     "spec.desktop.pod.nodeSelector.disk: Invalid value"),
    (pool(desktop={"vm": {"volume": "v", "memory": "0Mi"}, "pod": {"image": "x"}}),
     "spec.desktop.vm.memory: Invalid value"),
    (pool(egress=[{"ports": [{"endPort": 90}]}]), "spec.egress[0].ports[0].endPort: Invalid"),
    (pool(egress=[{"ports": [{"port": 100, "endPort": 90}]}]), "spec.egress[0].ports[0].endPort"),
    (egress(podSelector={"matchExpressions": [{"key": "k", "operator": "In"}]}),
     "spec.egress[0].to[0].podSelector.matchExpressions[0]: Invalid value"),
    (egress(namespaceSelector={"matchExpressions": [
        {"key": "k", "operator": "Exists", "values": ["v"]}]}),
     "spec.egress[0].to[0].namespaceSelector.matchExpressions[0]: Invalid value"),
    (egress(ipBlock={"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}),
     "spec.egress[0].to[0].ipBlock.except: Invalid value"),
    (egress(ipBlock={"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}),
     "spec.egress[0].to[0].ipBlock.except: Invalid value"),
    (egress(podSelector={"matchLabels": {"bad key": "v"}}),
     "spec.egress[0].to[0].podSelector.matchLabels: Invalid value"),
    (pool(desktop={"pod": {"tolerations": [{"key": "not a key!", "operator": "Exists"}]}}),
     "spec.desktop.pod.tolerations[0].key: Invalid value"),
    (pool(desktop={"pod": {"resources": {"limits": {"cpu": "-1"}}}}),
     "spec.desktop.pod.resources.limits.cpu: Invalid value"),
    (pool(desktop={"pod": {"resources": {"limits": {"gpu": 1}}}}),
     "each resource is cpu, memory, ephemeral-storage, hugepages-<size> or an extended"),
    (run(trainer={"resources": {"requests": {"nvidia.com/gpu": 1}}}),
     "an extended resource (<domain>/<name>) or hugepages cannot be overcommitted"),
    (pool(desktop={"pod": {"resources": {"limits": {"hugepages-2Mi": "2Mi"}}}}),
     "hugepages need a cpu or memory request or limit beside them"),
]  # fmt: skip

VALID_EDGES = [
    run(trainer={"nodes": 1024, "gpusPerNode": 16}),
    run(sandboxes={**STATIC, "minReady": 2}),
    run(warmup={"demonstrations": "/d", "epochs": 6, "stopWhen": {"everyEpochs": 5}}),
    run(algorithm={"mode": "perTurn", "turnDiscount": 0.9}),
    run(model={"path": "/models/tiny", "volume": "models"}),
    run(seed=2**32 - 1, steps=1_000_000),
    pool(replicas=9999, warmSpares=1),
    pool(desktop={"pod": {"tolerations": [
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        {"key": "team", "value": "a", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux", "example.com/pool": ""}}}),
    pool(egress=[{"ports": [{"port": 8000, "endPort": 8100}], "to": [
        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
        {"podSelector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]}}]}]),
    pool(**EXTERNAL, replicas=2),
    pool(backend="external", desktop={"external": {"endpoints": [
        "http://desk-1.lab.example:8000", "http://127.0.0.1:9000/", "http://192.168.1.20"]}}),
    pool(desktop={"pod": {"resources": {
        "limits": {"cpu": 2, "memory": "4Gi", "hugepages-2Mi": "2Mi", "example.com/dev": 1},
        "requests": {"cpu": "1", "hugepages-2Mi": "2Mi", "example.com/dev": 1}}}}),
]  # fmt: skip


def dry_run(cluster: Any, manifest: dict) -> Any:
    return cluster.kubectl(
        "apply", "--dry-run=server", "-n", "default", "-f", "-",
        input=yaml.safe_dump(manifest), check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("manifest", "message"), BOUNDS + GAPS, ids=[m[:48] for _, m in BOUNDS + GAPS]
)
def test_api_server_refuses_naming_the_field(cluster, crds, manifest, message):
    proc = dry_run(cluster, manifest)
    assert proc.returncode != 0, f"admitted: {manifest['spec']}"
    assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize("manifest", VALID_EDGES, ids=range(len(VALID_EDGES)))
def test_api_server_admits_the_valid_edges(cluster, crds, manifest):
    proc = dry_run(cluster, manifest)
    assert proc.returncode == 0, proc.stderr
