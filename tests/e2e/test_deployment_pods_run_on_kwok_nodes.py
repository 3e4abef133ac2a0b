"""The scheduler places a Deployment's pods on kwok nodes and kwok makes them Running/Ready;
the EndpointSlice controller then publishes their IPs for a Service, and deleting the owner
lets the garbage collector remove every child."""

import pytest
from kubernetes import client

from kubecua_testkit.wait import wait_for_objects

LABELS = {"app": "web"}


def is_ready(pod) -> bool:
    conditions = pod.status.conditions or []
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in conditions
    )


@pytest.fixture
def web(cluster, namespace):
    api = cluster.api_client()
    apps = client.AppsV1Api(api)
    container = client.V1Container(name="web", image="example.invalid/web:1")
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=LABELS), spec=client.V1PodSpec(containers=[container])
    )
    spec = client.V1DeploymentSpec(
        replicas=3, selector=client.V1LabelSelector(match_labels=LABELS), template=template
    )
    apps.create_namespaced_deployment(
        namespace, client.V1Deployment(metadata=client.V1ObjectMeta(name="web"), spec=spec)
    )
    core = client.CoreV1Api(api)
    pods = wait_for_objects(
        core.list_namespaced_pod,
        lambda ps: len([p for p in ps if is_ready(p)]) == 3,
        namespace=namespace,
        label_selector="app=web",
    )
    return api, pods


def test_pods_are_scheduled_on_kwok_nodes_and_become_ready(cluster, web):
    api, pods = web
    kwok_nodes = {n.metadata.name for n in client.CoreV1Api(api).list_node().items}
    assert len(kwok_nodes) >= 3
    assert all(p.spec.node_name in kwok_nodes for p in pods)
    assert all(p.status.pod_ip for p in pods)


def test_service_endpointslices_carry_the_pod_ips(cluster, namespace, web):
    api, pods = web
    core = client.CoreV1Api(api)
    port = client.V1ServicePort(name="http", port=80, target_port=8080)
    svc = client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector=LABELS, ports=[port]),
    )
    core.create_namespaced_service(namespace, svc)
    want = {p.status.pod_ip for p in pods}

    def addresses(slices):
        return {a for s in slices for e in s.endpoints or [] for a in e.addresses}

    slices = wait_for_objects(
        client.DiscoveryV1Api(api).list_namespaced_endpoint_slice,
        lambda s: addresses(s) == want,
        namespace=namespace,
        label_selector="kubernetes.io/service-name=web",
    )
    assert addresses(slices) == want
    assert {p.port for s in slices for p in s.ports} == {8080}


def test_deleting_the_owner_garbage_collects_its_children(cluster, namespace, web):
    api, _ = web
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    assert len(apps.list_namespaced_replica_set(namespace).items) == 1
    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Background")
    wait_for_objects(apps.list_namespaced_replica_set, lambda rs: not rs, namespace=namespace)
    wait_for_objects(core.list_namespaced_pod, lambda ps: not ps, namespace=namespace)
