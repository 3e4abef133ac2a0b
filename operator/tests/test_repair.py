"""Level-based repair (issue 13, finding 5): every pass compares the children a pool or run should
have with what exists and puts back what was deleted or edited, as a controller-runtime controller
would. Before, children were made once per spec generation and never looked at again.
"""

from __future__ import annotations

import time

from .conftest import wait_until
from .helpers import pool_manifest, wait_pool
from .test_pool_kubevirt_backend import kubevirt_pool
from .test_trainingrun_lifecycle import run_manifest


def token_name(kube, namespace: str, pool: str) -> str:
    uid = kube.get("SandboxPool", namespace, pool)["metadata"]["uid"]
    return f"{pool}-sandbox-token-{uid.replace('-', '')[:10]}"


def test_deleted_and_edited_children_of_pools_and_runs_come_back(kube, operator, namespace):
    kube.create(pool_manifest("desks", namespace, 1))
    kube.create(kubevirt_pool(namespace, 1))
    kube.create(run_manifest(namespace))  # waits for 2 ready sandboxes: no Job, static children
    wait_pool(kube, namespace, "desks", ready=1, total=1)
    secret = token_name(kube, namespace, "desks")
    children = [
        ("Secret", secret),
        ("NetworkPolicy", "desks-sandboxes"),
        ("Service", "vms-0-desktop"),
        ("ServiceAccount", "qwen-trainer"),
        ("Role", "qwen-trainer"),
        ("RoleBinding", "qwen-trainer"),
        ("ConfigMap", "qwen-config"),
        ("NetworkPolicy", "qwen-run"),
    ]
    for kind, name in children:
        wait_until(lambda k=kind, n=name: kube.get(k, namespace, n), 60, f"{kind} {name}")
    token = kube.get("Secret", namespace, secret)["data"]["token"]
    policy = kube.get("NetworkPolicy", namespace, "desks-sandboxes")["spec"]
    rules = kube.get("Role", namespace, "qwen-trainer")["rules"]

    started = time.monotonic()
    for kind, name in children:
        assert kube.delete(kind, namespace, name)
    back = wait_until(
        lambda: all(kube.get(k, namespace, n) for k, n in children), 60, "every child back"
    )
    healed_deletes = time.monotonic() - started
    assert back
    # The token is derived, not random: a recreated Secret holds the same token.
    assert kube.get("Secret", namespace, secret)["data"]["token"] == token

    started = time.monotonic()
    kube.patch("NetworkPolicy", namespace, "desks-sandboxes", {"spec": {"ingress": [{}]}})
    grant_all = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    kube.patch("Role", namespace, "qwen-trainer", {"rules": grant_all})
    wait_until(
        lambda: kube.get("NetworkPolicy", namespace, "desks-sandboxes")["spec"] == policy
        and kube.get("Role", namespace, "qwen-trainer")["rules"] == rules,
        60,
        "the opened NetworkPolicy and widened Role restored",
    )
    healed_edits = time.monotonic() - started
    print(f"heal: 8 deleted children {healed_deletes:.1f}s, 2 edited {healed_edits:.1f}s")
