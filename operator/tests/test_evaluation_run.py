"""spec.evaluation on the real control plane: the trainer may read the held-out tasks' ConfigMap
(and no other), a run with steps 0 (evaluation only) goes Pending -> Running -> Succeeded like any
run, and the trainer's status.evaluation patch is kept by the CRD's status schema, left alone by
the operator, and printed in the `Eval` column.
"""

from __future__ import annotations

from typing import Any

import yaml

from .conftest import wait_until
from .helpers import condition, set_pod_status
from .test_run_rbac import allowed, wait_binding
from .test_trainingrun_lifecycle import run_manifest, run_status, start_run, wait_phase

HELD_OUT = {"tasks": {"configMapRef": "heldout"}, "episodesPerTask": 4}
# What kubecua_trainer patches after evaluating (the shape fixed in docs/api.md).
EVALUATION = {
    "step": 0,
    "successRate": 0.5,
    "meanScore": 0.625,
    "episodes": 8,
    "excluded": 1,
    "passAtK": {"k": 4, "value": 0.75},
    "time": "2026-11-25T04:00:00Z",
    "tasks": [
        {"id": "files-copy-1", "successRate": 0.25, "episodes": 4},
        {"id": "files-copy-2", "successRate": 0.75, "episodes": 4},
    ],
    "tasksTruncated": False,
}


def printed_row(cluster: Any, namespace: str) -> dict[str, str]:
    """`kubectl get trun qwen` as {column: value}; columns are cut at the header's offsets, so an
    empty cell (a status field not yet written) stays empty instead of shifting the others."""
    header, row = cluster.kubectl("get", "trun", "qwen", "-n", namespace).stdout.splitlines()[:2]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = zip(starts, [*starts[1:], None], strict=True)
    return {header[a:b].strip(): row[a:b].strip() for a, b in bounds}


def test_trainer_reads_the_held_out_tasks_config_map_and_no_other(
    cluster, kube, operator, namespace
):
    kube.create(run_manifest(namespace, evaluation=HELD_OUT))
    wait_binding(cluster, kube, namespace)
    assert allowed(cluster, namespace, "get", "configmap/heldout")  # spec.evaluation.tasks
    assert allowed(cluster, namespace, "get", "configmap/osworld")  # spec.tasks
    assert not allowed(cluster, namespace, "get", "configmap/unrelated")
    assert not allowed(cluster, namespace, "list", "configmaps")


def test_an_evaluation_only_run_is_reconciled_like_any_run_and_succeeds(
    cluster, kube, operator, namespace
):
    pod = start_run(kube, namespace, steps=0, evaluation=HELD_OUT)[0]  # waits for Running
    config = kube.get("ConfigMap", namespace, "qwen-config")
    spec = yaml.safe_load(config["data"]["trainingrun.yaml"])["spec"]
    assert (spec["steps"], spec["evaluation"]["tasks"]) == (0, {"configMapRef": "heldout"})

    progress = {"step": 0, "totalSteps": 0, "evaluation": EVALUATION}
    kube.patch("TrainingRun", namespace, "qwen", {"status": progress}, sub="status")
    passes = operator.reconciles("TrainingRun")
    wait_until(lambda: operator.reconciles("TrainingRun") >= passes + 2, 30, "2 more passes")
    st = run_status(kube, namespace)
    assert st["evaluation"] == EVALUATION  # nothing pruned by the schema, nothing overwritten
    assert st["phase"] == "Running"
    row = printed_row(cluster, namespace)
    assert (row["PHASE"], row["STEP"], row["STEPS"], row["EVAL"]) == ("Running", "0", "0", "0.5")

    set_pod_status(kube, namespace, pod["metadata"]["name"], {"phase": "Succeeded"})
    st = wait_phase(kube, namespace, "Succeeded")
    assert condition(st, "Progressing")["message"] == "trainer finished its evaluation"
    assert st["evaluation"] == EVALUATION
