"""Fields the operator copies into a Job, Pod or Service are refused at the run's or pool's
admission, naming the field (issue 35, finding 5), and not later at the child's, where only a
condition could tell: image references with spaces, a queue name that is no label value, a
checkpoint path that is relative or one of the trainer's own mounts, and unbounded maps that
every sandbox pod would copy.
"""

from __future__ import annotations

import pytest
import yaml

from .test_crd_validation import POOL, RUN, with_spec

MODEL_VOLUME = {"path": "/models/qwen/7b", "volume": "models"}
BAD = [
    ("trainer image with a space", with_spec(RUN, trainer={"image": "evil image:1"}),
     "spec.trainer.image"),
    ("sandbox image with a space", with_spec(POOL, desktop={"pod": {"image": "a b"}}),
     "spec.desktop.pod.image"),
    ("containerDisk with a space",
     with_spec(POOL, backend="kubevirt", desktop={"kubevirt": {"containerDisk": "x y"}}),
     "spec.desktop.kubevirt.containerDisk"),
    ("queue name not a label value", with_spec(RUN, kueue={"queueName": "team a/queue"}),
     "spec.kueue.queueName"),
    ("relative checkpoint path", with_spec(RUN, checkpoint={"path": "ckpt"}),
     "spec.checkpoint.path"),
    ("checkpoint path on the config mount", with_spec(RUN, checkpoint={"path": "/etc/kubecua"}),
     "spec.checkpoint.path"),
    ("checkpoint path on the model's directory",
     with_spec(RUN, model=MODEL_VOLUME, checkpoint={"path": "/models/qwen"}),
     "spec.checkpoint.path"),
    ("33 tolerations", with_spec(POOL, desktop={"pod": {"tolerations": [{"key": "k"}] * 33}}),
     "spec.desktop.pod.tolerations"),
    ("a 6-field toleration",
     with_spec(POOL, desktop={"pod": {"tolerations": [
         {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule",
          "tolerationSeconds": 1, "padding": "x" * 1000}]}}),
     "spec.desktop.pod.tolerations[0]"),
    ("33 nodeSelector labels",
     with_spec(POOL, desktop={"pod": {"nodeSelector": {f"k{i}": "v" for i in range(33)}}}),
     "spec.desktop.pod.nodeSelector"),
    ("a 64-character nodeSelector value",
     with_spec(POOL, desktop={"pod": {"nodeSelector": {"k": "v" * 64}}}),
     "spec.desktop.pod.nodeSelector.k"),
]  # fmt: skip
GOOD = [
    with_spec(RUN, trainer={"image": "registry.example:5000/team/trainer:v1.2"},
              kueue={"queueName": "team-a.gpu_queue"}, checkpoint={"path": "/data/ckpt"}),
    with_spec(RUN, model=MODEL_VOLUME, checkpoint={"path": "/models/qwen/ckpt"}),
    with_spec(POOL, desktop={"pod": {
        "image": "ghcr.io/team/desk@sha256:" + "a" * 64,
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}] * 32,
        "nodeSelector": {f"k{i}": "v" * 63 for i in range(32)}}}),
]  # fmt: skip


def dry_run(cluster, manifest):
    return cluster.kubectl(
        "create", "--dry-run=server", "-n", "default", "-f", "-",
        input=yaml.safe_dump(manifest), check=False,
    )  # fmt: skip


@pytest.mark.parametrize(("case", "manifest", "field"), BAD, ids=[b[0] for b in BAD])
def test_api_server_refuses_specs_that_would_fail_at_the_child(
    cluster, crds, case, manifest, field
):
    proc = dry_run(cluster, manifest)
    assert proc.returncode != 0, f"{case}: accepted"
    assert field in proc.stderr, proc.stderr


@pytest.mark.parametrize("manifest", GOOD, ids=range(len(GOOD)))
def test_api_server_accepts_the_child_fields_valid_edges(cluster, crds, manifest):
    proc = dry_run(cluster, manifest)
    assert proc.returncode == 0, proc.stderr
