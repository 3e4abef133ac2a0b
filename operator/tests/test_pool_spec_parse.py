"""A SandboxPool's spec is parsed as a TrainingRun's is (kubecua_operator/parsed.py): a spec the
model refuses (one stored under an older schema) raises InvalidSpec naming each field as kubectl
writes it, list indexes included. The pool_readiness index, which must not raise, then holds
nothing for the pool and logs the refusal once; a pool that parses gets an entry naming its token
Secret as its backend does, which is what its runs' trainers mount. The pool's pass reports such
a spec in its status and a Warning Event, naming the fields, and builds nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kubecua_api.errors import InvalidSpec
from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_operator import k8s, main
from kubecua_operator.parsed import parse
from kubecua_operator.sandboxpool import reconcile
from kubecua_operator.sandboxpool.memory import PoolMemory
from kubecua_operator.trainingrun.model import BoundPool

from .conftest import wait_until
from .helpers import condition, pool_manifest, pool_status

UID = "0f1e2d3c-aaaa-4bbb-8ccc-111122223333"
STALE = {  # admitted by an older CRD, refused by today's model
    "backend": "external",
    "desktop": {"external": {"endpoints": ["http://10.0.0.5:8000", "ftp://10.0.0.6"]}},
    "reset": {"strategy": "reboot"},
}
DEMAND_MET = {"type": "DemandMet", "status": "True", "reason": "Met", "message": "2 of 2"}


def pool_body(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "desks", "namespace": "ns1", "uid": UID},
        "spec": spec,
        "status": status or {},
    }


def readiness(body: dict[str, Any]) -> dict | None:
    """The index function as kopf calls it (keyword arguments from the body)."""
    meta = body["metadata"]
    return asyncio.run(
        main.pool_readiness(
            body=body, spec=body["spec"], status=body["status"], namespace=meta["namespace"],
            name=meta["name"], uid=meta["uid"], logger=logging.getLogger("test"),
        )
    )  # fmt: skip


def test_a_bad_pool_spec_is_refused_naming_each_field_with_its_list_index():
    with pytest.raises(InvalidSpec) as err:
        parse(pool_body(STALE), SandboxPoolSpec)
    fields = [line.split(":")[0] for line in str(err.value).split("; ")]
    assert fields == ["spec.desktop.external.endpoints[1]", "spec.reset.strategy"]
    assert "spec.reset.strategy: Input should be 'inPlace' or 'recreate'" in str(err.value)


def test_the_readiness_index_holds_nothing_for_a_bad_pool_and_logs_it_once(caplog):
    caplog.set_level(logging.WARNING, logger="kubecua_operator.parsed")
    assert readiness(pool_body(STALE)) is None
    assert readiness(pool_body(STALE, {"readyReplicas": 1})) is None  # a status write: same spec
    refusals = [r.getMessage() for r in caplog.records]
    assert len(refusals) == 1
    assert refusals[0].startswith("SandboxPool ns1/desks: its spec does not parse: spec.desktop")
    assert "spec.reset.strategy" in refusals[0]
    fixed = pool_body({"replicas": 2}, {"readyReplicas": 2})
    assert readiness(fixed) == {
        ("ns1", "desks"): BoundPool(2, "desks-sandbox-token-0f1e2d3caa", None, UID)
    }
    assert readiness(pool_body(STALE)) is None
    assert len(caplog.records) == 2  # broken again after it parsed: said again


@pytest.mark.parametrize(
    ("spec", "secret"),
    [
        ({"backend": "pod"}, "desks-sandbox-token-0f1e2d3caa"),  # the operator's, by uid
        (
            {"backend": "kubevirt", "desktop": {"kubevirt": {"containerDisk": "img"}}},
            "desks-sandbox-token-0f1e2d3caa",
        ),
        (
            {"backend": "external", "desktop": {"external": {"endpoints": ["http://a.lab:8000"]}}},
            "desks-sandbox-token",  # its owner's
        ),
    ],
    ids=["pod", "kubevirt", "external"],
)
def test_the_readiness_entry_names_the_token_secret_as_the_pools_backend_does(spec, secret):
    body = pool_body(spec, {"readyReplicas": 3, "conditions": [DEMAND_MET]})
    assert readiness(body) == {
        ("ns1", "desks"): BoundPool(3, secret, ("True", "Met", "2 of 2"), UID)
    }


def test_a_stored_pool_spec_the_model_refuses_is_reported_naming_the_field_and_nothing_built(
    kube, crds, namespace, monkeypatch
):
    kube.create(pool_manifest("old", namespace, 2))
    body = wait_until(lambda: kube.get("SandboxPool", namespace, "old"), 30, "the pool")
    body["spec"]["reset"]["strategy"] = "reboot"  # what an older schema let be stored
    # Not a stand-in: the pass talks to this test's real API server (k8s.py otherwise builds its
    # client from the ambient kubeconfig, which names no cluster here).
    monkeypatch.setattr(k8s, "_kube", kube)
    asyncio.run(reconcile.reconcile_pool(body, [], PoolMemory()))
    st = pool_status(kube, namespace, "old")
    why = "spec.reset.strategy: Input should be 'inPlace' or 'recreate'"
    assert (condition(st, "Ready")["status"], condition(st, "Ready")["reason"]) == (
        "False", "InvalidSpec",
    )  # fmt: skip
    degraded = condition(st, "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True", "InvalidSpec", why,
    )  # fmt: skip
    warnings = [e for e in kube.list("Event", namespace) if e["type"] == "Warning"]
    assert [(e["reason"], e["message"]) for e in warnings] == [("InvalidSpec", why)]
    assert kube.list("Pod", namespace) == []  # no sandbox
    assert kube.list("Secret", namespace) == []  # not even the pool's token
