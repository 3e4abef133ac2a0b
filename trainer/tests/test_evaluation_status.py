"""An evaluate-only TrainingRun (steps 0) patches its held-out figures into the TrainingRun's
status on the real local control plane (kube-apiserver with the CRD from crds/), through the
trainer's own cluster path: RunOptions(patch_status=True) and the kubeconfig.

The `cluster` and `namespace` fixtures come from kubecua_testkit (conftest.py registers it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from control_plane import install_trainingrun_crd, require_control_plane
from kubernetes import client
from loopback_sandbox import TOKEN
from test_evaluation_run import ScoredSandbox, write_tasks

from kubecua_trainer.config import API_VERSION, KIND, ConfigError, TasksConfig, parse_training_run
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.run.train import RunOptions, train
from kubecua_trainer.sources.static import StaticSource
from kubecua_trainer.telemetry.status import GROUP, PLURAL, VERSION

require_control_plane()


@pytest.fixture(scope="module")
def api(cluster):
    return install_trainingrun_crd(cluster)


@pytest.mark.asyncio
async def test_evaluation_reaches_the_trainingrun_status(
    api, namespace, cluster, tmp_path: Path, tiny_model_dir: Path, monkeypatch
) -> None:
    train_dir, held_dir = write_tasks(tmp_path / "tasks")
    with ScoredSandbox() as sb:
        spec = {
            "model": {"path": str(tiny_model_dir), "dtype": "float32"},
            "sandboxes": {"urls": [sb.url]},
            "tasks": {"path": str(train_dir)},
            "evaluation": {
                "tasks": {"path": str(held_dir)},
                "episodesPerTask": 2,
                "maxTurns": 1,
            },
            "algorithm": {"maxNewTokens": 4},
            "rollout": {"maxPixels": 112 * 84},
            "metrics": {"port": 0},
            "steps": 0,
            "outputDir": str(tmp_path / "out"),
        }
        obj = {"apiVersion": API_VERSION, "kind": KIND,
               "metadata": {"name": "eval-only", "namespace": namespace}, "spec": spec}  # fmt: skip
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))  # the trainer's own client
        opts = RunOptions(console=False, source=StaticSource([sb.url], TOKEN), patch_status=True)
        await train(parse_training_run(obj), opts)
    got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "eval-only")
    evaluation = got["status"]["evaluation"]
    summary = json.loads((tmp_path / "out/evaluations/step-0000/summary.json").read_text())
    # scores 1, 0, 0.5 for h-open, h-save, h-find, two episodes each
    assert evaluation["step"] == 0
    assert evaluation["successRate"] == pytest.approx(1 / 3, abs=1e-6)
    assert evaluation["meanScore"] == 0.5
    assert evaluation["episodes"] == 6
    assert evaluation["excluded"] == 0
    assert evaluation["passAtK"] == {"k": 2, "value": pytest.approx(1 / 3, abs=1e-6)}
    assert evaluation["tasks"] == [
        {"id": "h-find", "episodes": 2, "successRate": 0.0},
        {"id": "h-open", "episodes": 2, "successRate": 1.0},
        {"id": "h-save", "episodes": 2, "successRate": 0.0},
    ]
    assert evaluation["tasksTruncated"] is False
    assert evaluation["successRate"] == pytest.approx(summary["success_rate"], abs=1e-6)


def test_held_out_tasks_from_a_configmap_take_their_domain_from_snapshot(api, namespace) -> None:
    core = client.CoreV1Api(api)
    chrome = {"id": "c1", "instruction": "x", "evaluator": {}, "snapshot": "chrome"}
    plain = {"id": "p1", "instruction": "y", "evaluator": {}}
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="held-out"),
        data={"a.json": json.dumps(chrome), "b.json": json.dumps(plain)},
    )
    core.create_namespaced_config_map(namespace, body)
    domains: dict[str, str] = {}
    cfg = TasksConfig(config_map_ref="held-out")
    tasks = load_tasks(cfg, namespace, core, field="spec.evaluation.tasks", domains=domains)
    assert [t["id"] for t in tasks] == ["c1", "p1"]
    assert domains == {"c1": "chrome", "p1": "default"}
    with pytest.raises(ConfigError, match=r"^spec\.evaluation\.tasks\.configMapRef: .*404"):
        load_tasks(TasksConfig(config_map_ref="absent"), namespace, core, "spec.evaluation.tasks")
