"""The command-line tools users run (kubectl, helm) work against the local control plane."""

import json

import yaml


def test_kubectl_lists_ready_kwok_nodes(cluster):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    ready = [n for n in nodes if _ready(n)["status"] == "True"]
    assert len(ready) >= 3
    assert all(n["metadata"]["annotations"].get("kwok.x-k8s.io/node") == "fake" for n in nodes)


def _ready(node):
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_server_version_is_the_pinned_build(cluster):
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == version["clientVersion"]["gitVersion"]
    assert version["serverVersion"]["gitVersion"].startswith("v1.")


def test_helm_installs_lists_and_uninstalls_a_chart(cluster, namespace, tmp_path):
    chart = tmp_path / "hello"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "hello", "version": "0.1.0"})
    )
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hello"},
        "data": {"greeting": "{{ .Values.greeting }}"},
    }
    (chart / "templates" / "cm.yaml").write_text(yaml.safe_dump(configmap))
    (chart / "values.yaml").write_text("greeting: hi\n")
    cluster.helm("install", "hello", str(chart), "-n", namespace, "--set", "greeting=hej", "--wait")
    releases = json.loads(cluster.helm("list", "-n", namespace, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("hello", "deployed")]
    cm = json.loads(cluster.kubectl("get", "cm", "hello", "-n", namespace, "-o", "json").stdout)
    assert cm["data"] == {"greeting": "hej"}
    cluster.helm("uninstall", "hello", "-n", namespace, "--wait")
    gone = cluster.kubectl("get", "cm", "hello", "-n", namespace, check=False)
    assert gone.returncode != 0
    assert "NotFound" in gone.stderr
