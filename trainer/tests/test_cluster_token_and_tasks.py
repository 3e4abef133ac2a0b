"""Against the real local control plane: the sandbox bearer token from sandboxes.tokenSecretRef
(with the $KUBECUA_SANDBOX_TOKEN(_FILE) fallback) and OSWorld tasks from tasks.configMapRef.

The client finds the cluster the way a local run does, through $KUBECONFIG (load_kube_config)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from control_plane import require_control_plane
from kubernetes import client

from kubecua_trainer.config import ConfigError, SandboxesConfig, TasksConfig
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.sources import build_source, resolve_token

require_control_plane()

SUITE = Path(__file__).resolve().parents[2] / "sandbox-image" / "tasks"


@pytest.fixture
def core(cluster, monkeypatch: pytest.MonkeyPatch) -> client.CoreV1Api:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.delenv("KUBECUA_SANDBOX_TOKEN", raising=False)
    monkeypatch.delenv("KUBECUA_SANDBOX_TOKEN_FILE", raising=False)
    return client.CoreV1Api(cluster.api_client())


def make_secret(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), data=encoded)
    core.create_namespaced_secret(namespace, body)


def pool_cfg(secret: str | None) -> SandboxesConfig:
    return SandboxesConfig(pool_ref="desktops", token_secret_ref=secret)


def test_token_comes_from_the_secret_before_the_environment(core, namespace, monkeypatch) -> None:
    make_secret(core, namespace, "sandbox-token", {"token": "from-the-secret\n"})
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN", "from-the-env")
    assert resolve_token(pool_cfg("sandbox-token"), namespace) == "from-the-secret"
    source = build_source(
        SandboxesConfig(urls=["http://127.0.0.1:1"], token_secret_ref="sandbox-token"),
        "/tmp",
        namespace,
    )
    assert source.token == "from-the-secret"


def test_no_ref_uses_the_environment_file(core, namespace, monkeypatch, tmp_path) -> None:
    (tmp_path / "token").write_text("mounted-token\n")
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN_FILE", str(tmp_path / "token"))
    assert resolve_token(pool_cfg(None), namespace) == "mounted-token"


def test_unreadable_secret_falls_back_to_the_environment(core, namespace, monkeypatch) -> None:
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN", "from-the-env")
    assert resolve_token(pool_cfg("no-such-secret"), namespace) == "from-the-env"


def test_unreadable_secret_without_fallback_names_the_cause(core, namespace) -> None:
    with pytest.raises(ConfigError, match=rf"tokenSecretRef: secret {namespace}/gone: HTTP 404"):
        resolve_token(pool_cfg("gone"), namespace)
    make_secret(core, namespace, "wrong-key", {"password": "x"})
    with pytest.raises(ConfigError, match="has no key `token`"):
        resolve_token(pool_cfg("wrong-key"), namespace)


def test_no_cluster_access_falls_back_to_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN", "from-the-env")
    assert resolve_token(pool_cfg("sandbox-token"), "default") == "from-the-env"
    monkeypatch.delenv("KUBECUA_SANDBOX_TOKEN")
    with pytest.raises(ConfigError, match="no cluster access"):
        resolve_token(pool_cfg("sandbox-token"), "default")


def suite_task(task_id: str) -> str:
    return next(SUITE.rglob(f"{task_id}.json")).read_text()


def make_config_map(core: client.CoreV1Api, namespace: str, name: str, data: dict) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data)
    core.create_namespaced_config_map(namespace, body)


def test_tasks_come_from_the_config_map(core, namespace) -> None:
    listed = [json.loads(suite_task("gedit-greeting")), {"not": "a task"}]
    make_config_map(
        core,
        namespace,
        "tasks",
        {
            "infeasible-cloud-upload.json": suite_task("infeasible-cloud-upload"),
            "more.json": json.dumps(listed),
            "notes.json": json.dumps({"reference": []}),  # not a task: ignored
        },
    )
    tasks = load_tasks(TasksConfig(config_map_ref="tasks"), namespace)
    assert sorted(t["id"] for t in tasks) == ["gedit-greeting", "infeasible-cloud-upload"]
    infeasible = next(t for t in tasks if t["id"] == "infeasible-cloud-upload")
    assert infeasible["evaluator"] == {"func": "infeasible"}
    ordered = load_tasks(
        TasksConfig(config_map_ref="tasks", ids=["infeasible-cloud-upload", "gedit-greeting"]),
        namespace,
    )
    assert [t["id"] for t in ordered] == ["infeasible-cloud-upload", "gedit-greeting"]
    with pytest.raises(ConfigError, match=r"tasks.ids: not found in configmap tasks: \['nope'\]"):
        load_tasks(TasksConfig(config_map_ref="tasks", ids=["nope"]), namespace)


def test_bad_config_maps_give_clear_errors(core, namespace) -> None:
    with pytest.raises(ConfigError, match=rf"configmap {namespace}/absent: HTTP 404"):
        load_tasks(TasksConfig(config_map_ref="absent"), namespace)
    make_config_map(core, namespace, "broken", {"a.json": "{not json"})
    with pytest.raises(ConfigError, match=r"configmap broken key a\.json: not valid JSON"):
        load_tasks(TasksConfig(config_map_ref="broken"), namespace)
    make_config_map(core, namespace, "empty", {"readme": "{}"})
    with pytest.raises(ConfigError, match="no OSWorld tasks"):
        load_tasks(TasksConfig(config_map_ref="empty"), namespace)
