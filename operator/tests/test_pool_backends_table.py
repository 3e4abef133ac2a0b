"""Each backend's hooks as tables, against the real API server.

Build: a pool spec, defaulted by the API server (a dry-run create of the SandboxPool), goes through
the backend's build and shared_objects; every object is dry-run created too, so the API server
(with KubeVirt's CRD schema for VirtualMachines) admits it as stored, and the table names values
of the stored objects. Dry runs persist nothing, so a session's running operator never sees them.

Observe: real children with the status a kubelet, virt-controller or the operator would write are
read back from the API server and summarized as the pool's indexes summarize them; the table names
the state each sandbox gets, and the repairs the backend asks for.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubecua_operator import names
from kubecua_operator.k8s import Kube, adopt
from kubecua_operator.sandboxpool import backends, plan
from kubecua_operator.sandboxpool.backends.external import build_slice
from kubecua_operator.sandboxpool.model import (
    FAILED,
    PENDING,
    READY,
    TERMINATING,
    Pool,
    Probe,
    parse_pool,
    summarize_object,
    summarize_pod,
)
from kubecua_operator.settings import Settings

Obj = dict[str, Any]
OP_NS = "kubecua-system"
HOLD = "kubecua.dev/test-hold"  # a finalizer that keeps a deleted child visible as deleting


def dry_create(kube: Kube, obj: Obj) -> Obj:
    meta = obj["metadata"]
    out: Obj = kube.request("POST", kube.path(obj["kind"], meta["namespace"]) + "?dryRun=All", obj)
    return out


def admitted_pool(kube: Kube, namespace: str, name: str, spec: Obj) -> Pool:
    """The pool as the API server stores it, its CRD's defaults filled in, parsed as a pass
    parses it."""
    manifest = {"apiVersion": "kubecua.dev/v1alpha1", "kind": "SandboxPool",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip
    pool = dry_create(kube, manifest)
    pool["metadata"].setdefault("uid", "0d5e6f70-aaaa-bbbb-cccc-000000000001")
    return parse_pool(pool)


# --- build: (backend, spec, index) -> values of the admitted objects, by (kind, name) ---------

CONTAINER = "spec.containers.0"
VM_TMPL = "spec.template.spec"
BUILD_CASES = [
    pytest.param(
        "desks",
        {"backend": "pod"},
        0,
        {
            ("Pod", "desks-0"): {
                f"{CONTAINER}.image": Settings().sandbox_image,
                f"{CONTAINER}.env.env:KUBECUA_SCREEN_WIDTH": "1920",
                f"{CONTAINER}.env.env:KUBECUA_SCREEN_HEIGHT": "1080",
                f"{CONTAINER}.env.env:KUBECUA_RESET_VERIFY": "true",
                "spec.volumes.0.secret.secretName": "OWN_TOKEN",
                "spec.restartPolicy": "Never",
                "metadata.labels.kubecua\\.dev/role": "episode-server",
            },
            ("NetworkPolicy", "desks-sandboxes"): {
                "spec.egress": None,
                "spec.ingress.1.ports.0.port": 8000,
            },
        },
        id="pod-defaults",
    ),
    pytest.param(
        "desks",
        {
            "backend": "pod",
            "desktop": {
                "screen": {"width": 1280, "height": 720},
                "pod": {"image": "registry.example/sandbox:2", "nodeSelector": {"gpu": "no"}},
            },
            "reset": {"verify": False},
            "egress": [{"ports": [{"protocol": "TCP", "port": 443}]}],
        },
        3,
        {
            ("Pod", "desks-3"): {
                f"{CONTAINER}.image": "registry.example/sandbox:2",
                f"{CONTAINER}.env.env:KUBECUA_SCREEN_WIDTH": "1280",
                f"{CONTAINER}.env.env:KUBECUA_RESET_VERIFY": "false",
                "spec.nodeSelector": {"gpu": "no"},
            },
            ("NetworkPolicy", "desks-sandboxes"): {
                "spec.egress": [{"ports": [{"protocol": "TCP", "port": 443}]}]
            },
        },
        id="pod-image-screen-egress",
    ),
    pytest.param(
        "desks",
        {
            "backend": "pod",
            "desktop": {
                "pod": {"image": "registry.example/sandbox-vm:1"},
                "vm": {"volume": "base-disk", "kvm": True, "memory": "3Gi", "cpu": 3},
            },
        },
        1,
        {
            ("Pod", "desks-1"): {
                f"{CONTAINER}.name": "vm",
                f"{CONTAINER}.resources.limits.devices\\.kubevirt\\.io/kvm": "1",
                "spec.containers.1.name": "sandbox",
                "spec.containers.1.ports": [
                    {"name": "episodes", "containerPort": 8000, "protocol": "TCP"}
                ],
                "spec.containers.1.env.env:KUBECUA_VM_CONTROL_URL": "http://127.0.0.1:5100",
                "spec.volumes.1.persistentVolumeClaim": {
                    "claimName": "base-disk",
                    "readOnly": True,
                },
            },
            ("NetworkPolicy", "desks-sandboxes"): {"spec.egress": None},
        },
        id="pod-vm",
    ),
    pytest.param(
        "vms",
        {
            "backend": "kubevirt",
            "desktop": {"kubevirt": {"containerDisk": "registry.example/ubuntu:1", "cpu": 2}},
        },
        0,
        {
            ("VirtualMachine", "vms-0"): {
                f"{VM_TMPL}.domain.cpu.cores": 2,
                f"{VM_TMPL}.domain.memory.guest": "8Gi",
                f"{VM_TMPL}.volumes.0.containerDisk": {"image": "registry.example/ubuntu:1"},
                f"{VM_TMPL}.volumes.1.cloudInitNoCloud.userDataSecretRef.name": "OWN_TOKEN",
                f"{VM_TMPL}.readinessProbe.httpGet.port": 5000,
            },
            ("Service", "vms-0-desktop"): {"spec.ports.0.targetPort": 5000},
            ("Pod", "vms-0"): {
                f"{CONTAINER}.env.env:KUBECUA_DESKTOP_URL": "http://vms-0-desktop.NS.svc:5000",
                "spec.restartPolicy": "Always",
            },
            ("NetworkPolicy", "vms-sandboxes"): {
                "spec.ingress.2.ports": [{"protocol": "TCP", "port": p} for p in (5000, 9222, 8080)]
            },
        },
        id="kubevirt-containerdisk",
    ),
    pytest.param(
        "vms",
        {
            "backend": "kubevirt",
            "desktop": {
                "kubevirt": {
                    "containerDisk": "registry.example/kubecua-vm:1",
                    "kernelBoot": True,
                    "desktopPort": 5001,
                }
            },
        },
        2,
        {
            ("VirtualMachine", "vms-2"): {
                f"{VM_TMPL}.volumes.0.containerDisk.path": "/disk/disk.qcow2",
                f"{VM_TMPL}.domain.firmware.kernelBoot.container.image": (
                    "registry.example/kubecua-vm:1"
                ),
                f"{VM_TMPL}.readinessProbe.httpGet.port": 5001,
            },
            ("Service", "vms-2-desktop"): {"spec.ports.0.targetPort": 5001},
            ("Pod", "vms-2"): {"metadata.name": "vms-2"},
            ("NetworkPolicy", "vms-sandboxes"): {"spec.ingress.2.ports.0.port": 5001},
        },
        id="kubevirt-kernelboot",
    ),
    pytest.param(
        "vms",
        {"backend": "kubevirt", "desktop": {"kubevirt": {"dataVolume": "golden"}}},
        0,
        {
            ("VirtualMachine", "vms-0"): {
                "spec.dataVolumeTemplates.0.spec.source.pvc": {"name": "golden", "namespace": "NS"},
                f"{VM_TMPL}.volumes.0.dataVolume.name": "vms-0-disk",
            },
            ("Service", "vms-0-desktop"): {"metadata.name": "vms-0-desktop"},
            ("Pod", "vms-0"): {"metadata.name": "vms-0"},
            ("NetworkPolicy", "vms-sandboxes"): {"metadata.name": "vms-sandboxes"},
        },
        id="kubevirt-datavolume",
    ),
    *[
        pytest.param(
            "far",
            {
                "backend": "external",
                "desktop": {
                    "external": {
                        "endpoints": [
                            "http://10.0.0.5:8000",
                            "http://127.0.0.1:41234",
                            "http://desk-7.lab.example",
                        ]
                    }
                },
            },
            index,
            {
                ("EndpointSlice", f"far-{index}"): {
                    "addressType": kind,
                    "endpoints.0.addresses": [address],
                    "endpoints.0.conditions.ready": False,
                    "ports.0.port": port,
                    "metadata.labels.kubernetes\\.io/service-name": f"far-{index}",
                }
            },
            id=f"external-{index}",
        )
        for index, kind, address, port in [
            (0, "IPv4", "10.0.0.5", 8000),
            (1, "FQDN", "localhost.invalid", 41234),
            (2, "FQDN", "desk-7.lab.example", 80),
        ]
    ],
]


def value_at(obj: Any, path: str) -> Any:
    """`spec.containers.0.image` of an object: list items by number, `env:NAME` the value of
    env var NAME, `\\.` a dot inside a key (label names); None where a key is absent (the API
    server drops empty lists)."""
    for part in path.replace("\\.", "\0").split("."):
        part = part.replace("\0", ".")
        if isinstance(obj, list) and part.startswith("env:"):
            obj = next(e["value"] for e in obj if e["name"] == part[4:])
        elif isinstance(obj, list):
            obj = obj[int(part)]
        else:
            obj = obj.get(part)
    return obj


@pytest.mark.parametrize(("pool_name", "spec", "index", "want"), BUILD_CASES)
def test_build_table(kube, crds, namespace, pool_name, spec, index, want):
    pool = admitted_pool(kube, namespace, pool_name, spec)
    backend = backends.get(pool.spec.backend)
    built = backend.build(pool, index, Settings())
    shared = backend.shared_objects(pool, OP_NS)
    sandbox = names.sandbox_name(pool_name, index)
    # parts() names what build() makes, main object first: deletion removes exactly those.
    assert backend.parts(sandbox)[0] == (built[0]["kind"], sandbox)
    assert sorted(backend.parts(sandbox)) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in built
    )
    stored = {
        (o["kind"], o["metadata"]["name"]): o
        for o in (dry_create(kube, adopt(obj, pool.body)) for obj in built + shared)
    }
    assert set(stored) == set(want)
    own_token = names.own_token_secret(pool_name, pool.uid)
    for key, fields in want.items():
        for path, value in fields.items():
            if isinstance(value, str):
                value = value.replace("OWN_TOKEN", own_token).replace(".NS.", f".{namespace}.")
            if isinstance(value, dict) and value.get("namespace") == "NS":
                value = {**value, "namespace": namespace}
            assert value_at(stored[key], path) == value, (key, path)


def test_plan_options_and_token_secret_per_backend(kube, crds, namespace):
    external = admitted_pool(
        kube,
        namespace,
        "far",
        {
            "backend": "external",
            "replicas": 2,
            "maxReplicas": 5,
            "desktop": {
                "external": {"endpoints": ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]}
            },
        },
    )
    far = backends.get("external")
    options = plan.plan_options(external.spec, far.recycles, far.cap(external))
    # Recycles nothing: the operator cannot recreate a machine it did not make (the API server
    # refuses any reset but the default on an external pool: test_crd_validation.py).
    assert (options, external.spec.max_replicas) == (plan.Options(recycle_after=0, cap=2), 5)
    # Runs' demand may raise the pool to maxReplicas, but not past its endpoints.
    step = plan.make_plan(
        external.spec, [], {}, replace_allowed=True, burst=10, options=options, demand=5
    )
    assert (step.target, step.create) == (2, [0, 1])
    assert backends.get("external").token_secret("far", "u-1") == "far-sandbox-token"
    assert backends.get("external").shared_objects(external, OP_NS) == []
    pod_pool = admitted_pool(kube, namespace, "desks", {"reset": {"strategy": "recreate"}})
    pod = backends.get("pod")
    options = plan.plan_options(pod_pool.spec, pod.recycles, pod.cap(pod_pool))
    assert options == plan.Options(recycle_after=1, cap=None)  # recreate: after each episode
    for kind in ("pod", "kubevirt"):
        assert backends.get(kind).token_secret("desks", "0d5e6f70-aaaa") == (
            "desks-sandbox-token-0d5e6f70aa"
        )


# --- observe: children as written by kubelet / virt-controller -> sandbox state ---------------

GATE = [{"name": "kubecua.dev/test"}]  # kwok's nodes never get (or touch) a gated pod


def running(ready: bool, ip: str = "10.1.2.3") -> Obj:
    return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": str(ready)}]}  # fmt: skip


POD_STATUS = {
    "ready": running(True),
    "not-ready": running(False),
    "pending": {},
    "pull-error": {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "sandbox",
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": {"waiting": {"reason": "ErrImagePull"}},
            }
        ],
    },
    "failed": {"phase": "Failed"},
    "unschedulable": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    },
}


def real_child(kube: Kube, obj: Obj, status: Obj | None, deleting: bool, held: list) -> Obj:
    """Create `obj`, write its status as its controller would, optionally delete it behind a
    finalizer (so it stays, deleting); return it as the API server now holds it."""
    meta = obj["metadata"]
    kind, ns, name = obj["kind"], meta["namespace"], meta["name"]
    if kind == "Pod":
        obj["spec"]["schedulingGates"] = GATE
    if deleting:
        meta["finalizers"] = [HOLD]
        held.append((kind, ns, name))
    assert kube.create(obj)
    if status:
        kube.patch(kind, ns, name, {"status": status}, sub="status")
    if deleting:
        kube.delete(kind, ns, name)
    got = kube.get(kind, ns, name)
    assert got is not None
    return got


@pytest.fixture
def held(kube):
    """Children kept by the test's finalizer, released at the end so the namespace can go."""
    out: list[tuple[str, str, str]] = []
    yield out
    for kind, ns, name in out:
        kube.patch(kind, ns, name, {"metadata": {"finalizers": None}})


def test_pod_observe_table(kube, crds, namespace, held):
    pool = admitted_pool(kube, namespace, "desks", {"backend": "pod"})
    backend = backends.get("pod")
    cases = [*POD_STATUS.items(), ("deleting", running(True))]
    kids = []
    for index, (case, st) in enumerate(cases):
        pod = backend.build(pool, index, Settings())[0]
        kids.append(summarize_pod(real_child(kube, pod, st, case == "deleting", held)))
    # Not a sandbox: a pod of another role.
    other = backend.build(pool, 40, Settings())[0]
    other["metadata"]["labels"][names.ROLE_LABEL] = "vm"
    kids.append(summarize_pod(real_child(kube, other, running(True), False, held)))
    seen = {s.name: s for s in backend.observe(pool, kids, {})}
    url = "http://10.1.2.3:8000"
    want = {  # case: (state, url, unschedulable, reason)
        "ready": (READY, url, False, "Running"),
        "not-ready": (PENDING, url, False, "Running"),
        "pending": (PENDING, "", False, "Pending"),
        "pull-error": (FAILED, "", False, "ErrImagePull"),
        "failed": (FAILED, "", False, "Failed"),
        "unschedulable": (PENDING, "", True, "Pending"),
        "deleting": (TERMINATING, url, False, "Running"),
    }
    assert set(seen) == {f"desks-{i}" for i in range(len(cases))}
    for index, (case, _st) in enumerate(cases):
        box = seen[f"desks-{index}"]
        assert (box.index, box.uid) == (index, kids[index].uid)
        assert (box.state, box.url, box.unschedulable, box.reason) == want[case], case
    assert backend.repairs(pool, kids, {}, Settings()) == []
    assert backend.extra_children(kube, pool) == []
    assert backend.not_installed(kube) is None


VM_CASES = {  # case: (VM status, episode-server pod status or None for no pod)
    "ready": ({"ready": True, "printableStatus": "Running"}, running(True)),
    "vm-starting": ({"ready": False, "printableStatus": "Starting"}, running(True)),
    "server-starting": ({"ready": True, "printableStatus": "Running"}, running(False)),
    "vm-crashed": ({"ready": False, "printableStatus": "CrashLoopBackOff"}, running(True)),
    "server-failed": ({"ready": True, "printableStatus": "Running"}, {"phase": "Failed"}),
    "unschedulable": ({"ready": False, "printableStatus": "ErrorUnschedulable"}, {}),
    "no-server": ({"ready": True, "printableStatus": "Running"}, None),
}


def test_kubevirt_observe_table(kube, crds, namespace, held):
    pool = admitted_pool(
        kube,
        namespace,
        "vms",
        {
            "backend": "kubevirt",
            "desktop": {"kubevirt": {"containerDisk": "registry.example/u:1"}},
        },
    )
    backend = backends.get("kubevirt")
    kids = []
    for index, (vm_status, pod_status) in enumerate(VM_CASES.values()):
        vm, desktop, pod = backend.build(pool, index, Settings())
        kids.append(
            summarize_object("VirtualMachine", real_child(kube, vm, vm_status, False, held))
        )
        kids.append(summarize_object("Service", real_child(kube, desktop, None, False, held)))
        if pod_status is not None:
            kids.append(summarize_pod(real_child(kube, pod, pod_status, False, held)))
    seen = {s.name: s for s in backend.observe(pool, kids, {})}
    url = "http://10.1.2.3:8000"
    want = {  # case: (state, url, unschedulable, reason)
        "ready": (READY, url, False, "Running"),
        "vm-starting": (PENDING, url, False, "Starting"),
        "server-starting": (PENDING, url, False, "Running"),
        "vm-crashed": (FAILED, "", False, "CrashLoopBackOff"),
        "server-failed": (FAILED, "", False, "Running"),
        "unschedulable": (PENDING, "", True, "ErrorUnschedulable"),
        "no-server": (PENDING, "", False, "Running"),
    }
    for index, case in enumerate(VM_CASES):
        box = seen[f"vms-{index}"]
        assert box.index == index
        assert (box.state, box.url, box.unschedulable, box.reason) == want[case], case
    # The VM without its episode server gets one back; an edited desktop Service is restored.
    lost = list(VM_CASES).index("no-server")
    assert [(how, o["kind"], o["metadata"]["name"])
            for how, o in backend.repairs(pool, kids, {}, Settings())] == [
        ("create", "Pod", f"vms-{lost}")]  # fmt: skip
    kube.patch("Service", namespace, "vms-0-desktop", {"spec": {"selector": {"x": "y"}}})
    edited = summarize_object("Service", kube.get("Service", namespace, "vms-0-desktop"))
    kids = [edited if k.kind == "Service" and k.name == "vms-0-desktop" else k for k in kids]
    assert ("restore", "vms-0-desktop") in [
        (how, o["metadata"]["name"]) for how, o in backend.repairs(pool, kids, {}, Settings())
    ]
    assert backend.not_installed(kube) is None  # the test cluster serves KubeVirt's CRD


def test_external_observe_table(kube, crds, namespace, held):
    endpoints = ["http://10.0.0.5:8000", "http://10.0.0.6:8000", "http://10.0.0.7:8000"]
    pool = admitted_pool(
        kube,
        namespace,
        "far",
        {
            "backend": "external",
            "desktop": {"external": {"endpoints": endpoints}},
        },
    )
    backend = backends.get("external")
    cases = [  # (slice index, its ready condition, deleting, probe) -> state
        (0, True, False, Probe(True, False), READY),
        (1, False, False, Probe(True, False), PENDING),
        (2, True, True, None, TERMINATING),
        (7, True, False, None, PENDING),  # an index past the endpoints list
    ]
    kids, probes = [], {}
    for index, ready, deleting, probe, _state in cases:
        pool_for_slice = pool
        if index >= len(endpoints):  # written when the list was longer
            longer = endpoints + [f"http://10.0.1.{i}:8000" for i in range(index)]
            desktop = {"external": {"endpoints": longer}}
            pool_for_slice = parse_pool(
                {**pool.body, "spec": {**pool.body["spec"], "desktop": desktop}}
            )
        obj = build_slice(pool_for_slice, index, ready)
        kids.append(summarize_object("EndpointSlice", real_child(kube, obj, None, deleting, held)))
        if probe is not None:
            probes[f"far-{index}"] = probe
    seen = {s.name: s for s in backend.observe(pool, kids, probes)}
    for index, _ready, _deleting, _probe, state in cases:
        box = seen[f"far-{index}"]
        url = endpoints[index] if index < len(endpoints) else ""
        assert (box.index, box.state, box.url) == (index, state, url), index
    # The one slice whose probe disagrees with its ready condition is applied again, ready.
    repairs = backend.repairs(pool, kids, probes, Settings())
    assert [(how, o["metadata"]["name"], o["endpoints"][0]["conditions"]["ready"])
            for how, o in repairs] == [("apply", "far-1", True)]  # fmt: skip
