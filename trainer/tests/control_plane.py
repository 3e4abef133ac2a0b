"""The local control plane in the trainer's tests: skip a module, saying why, when its binaries
are not built; install this tree's TrainingRun CRD into a test cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes import client

from kubecua_testkit.tools import cache_dir

CRD = Path(__file__).resolve().parents[2] / "crds" / "kubecua.dev_trainingruns.yaml"
POOL_CRD = CRD.with_name("kubecua.dev_sandboxpools.yaml")

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
)


def require_control_plane() -> None:
    missing = [b for b in BINARIES if not (cache_dir() / "bin" / b).exists()]
    if missing:
        pytest.skip(
            f"control plane not built ({', '.join(missing)} missing): run `make setup-go`",
            allow_module_level=True,
        )


def install_trainingrun_crd(cluster: Any, crd: Path = CRD) -> Any:
    """Create (or replace with this tree's) the TrainingRun CRD (or `crd`), wait until it is
    Established, and return the cluster's API client."""
    api_client = cluster.api_client()
    ext = client.ApiextensionsV1Api(api_client)
    body = yaml.safe_load(crd.read_text())
    try:
        ext.create_custom_resource_definition(body)
    except client.ApiException as err:
        if err.status != 409:
            raise
        current = ext.read_custom_resource_definition(body["metadata"]["name"])
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(body["metadata"]["name"], body)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the Established condition
        crd = ext.read_custom_resource_definition(body["metadata"]["name"])
        conds = {c.type: c.status for c in (crd.status.conditions or [])}
        if conds.get("Established") == "True":
            break
        time.sleep(0.2)
    return api_client
