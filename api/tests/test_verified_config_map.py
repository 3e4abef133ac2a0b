"""spec.tasks.verified.configMapRef: the manifest ConfigMap's key is mounted as the file
`manifest`, so the model refuses a path where it cannot be mounted, naming the field as the
CRD's rule does (templates/trainingruns.yaml)."""

from __future__ import annotations

import pytest

from kubecua_api.errors import InvalidSpec, validate_spec
from kubecua_api.trainingrun import TrainingRunSpec

SPEC = {"model": {"path": "/m"}, "sandboxes": {"poolRef": "p"}, "steps": 1}


def spec_with(verified: dict) -> dict:
    return {**SPEC, "tasks": {"path": "/tasks", "verified": verified}}


def test_a_manifest_config_map_is_mounted_at_an_absolute_file_path() -> None:
    verified = {"manifest": "/verified/verified.json", "configMapRef": "ck-manifest"}
    spec = validate_spec(TrainingRunSpec, spec_with(verified))
    assert spec.tasks.verified is not None
    assert spec.tasks.verified.config_map_ref == "ck-manifest"
    # Without configMapRef the path is the trainer's to resolve (image or volume), as before.
    assert validate_spec(TrainingRunSpec, spec_with({"manifest": "rel/verified.json"}))


@pytest.mark.parametrize(
    "path", ["verified.json", "/v/", "/etc/kubecua/v.json", "/var/run/kubecua/x", "/dev", "/sys/x"]
)
def test_a_manifest_that_cannot_be_mounted_there_is_refused(path: str) -> None:
    with pytest.raises(InvalidSpec, match=r"^spec\.tasks\.verified: .*with configMapRef"):
        validate_spec(TrainingRunSpec, spec_with({"manifest": path, "configMapRef": "ck"}))
