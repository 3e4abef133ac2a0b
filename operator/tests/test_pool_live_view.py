"""spec.liveView on the real control plane: off by default; enabled, each sandbox pod gets the
live view's mode and its port (for `kubectl port-forward`), while the pool's default-deny
NetworkPolicy, as the API server stores it, still admits nobody to that port; and a pool whose
desktops are not the sandbox image's is refused naming spec.liveView.enabled."""

from __future__ import annotations

import pytest
import yaml

from kubecua_api.liveview import LIVE_VIEW_PORT

from .helpers import pool_manifest, sandbox_pods, wait_pool


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def ports_of(pod: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}


def test_live_view_is_off_unless_the_pool_enables_it(kube, operator, namespace) -> None:
    kube.create(pool_manifest("plain", namespace, 1))
    wait_pool(kube, namespace, "plain", ready=1, total=1)
    pod = sandbox_pods(kube, namespace, "plain")[0]
    assert "KUBECUA_LIVE_VIEW" not in env_of(pod)  # the image's default: off
    assert "live-view" not in ports_of(pod)


def test_enabled_live_view_is_read_only_and_the_policy_keeps_its_port_closed(
    kube, operator, namespace
) -> None:
    kube.create(pool_manifest("watched", namespace, 1, liveView={"enabled": True}))
    wait_pool(kube, namespace, "watched", ready=1, total=1)
    pod = sandbox_pods(kube, namespace, "watched")[0]
    assert env_of(pod)["KUBECUA_LIVE_VIEW"] == "viewOnly"  # read-only unless asked
    assert ports_of(pod)["live-view"] == LIVE_VIEW_PORT
    policy = kube.get("NetworkPolicy", namespace, "watched-sandboxes")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"kubecua.dev/pool": "watched"}
    assert "Ingress" in policy["policyTypes"]  # default-deny: only its rules let anyone in
    for rule in policy["ingress"]:
        opened = {p.get("port") for p in rule.get("ports") or []}
        assert opened, rule  # no rule opens every port
        assert not opened & {LIVE_VIEW_PORT, "live-view"}, rule
    services = kube.list("Service", namespace, "kubecua.dev/pool=watched")
    assert all(LIVE_VIEW_PORT not in {p["port"] for p in s["spec"]["ports"]} for s in services)

    kube.create(
        pool_manifest("steered", namespace, 1, liveView={"enabled": True, "interactive": True})
    )
    wait_pool(kube, namespace, "steered", ready=1, total=1)
    assert env_of(sandbox_pods(kube, namespace, "steered")[0])["KUBECUA_LIVE_VIEW"] == "interactive"


@pytest.mark.parametrize(
    "spec",
    [
        {"backend": "external", "desktop": {"external": {"endpoints": ["http://10.0.0.5:8000"]}}},
        {"desktop": {"vm": {"volume": "base"}, "pod": {"image": "localhost/x:dev"}}},
    ],
    ids=["external", "vm"],
)
def test_live_view_of_a_desktop_not_ours_is_refused_naming_the_field(cluster, crds, namespace,
                                                                     spec) -> None:  # fmt: skip
    manifest = pool_manifest("other", namespace, 1, liveView={"enabled": True}, **spec)
    done = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert done.returncode != 0
    assert "spec.liveView.enabled" in done.stderr, done.stderr
