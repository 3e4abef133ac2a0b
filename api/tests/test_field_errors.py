"""kubecua_api.errors, the one formatter of the models' refusals: the operator (a spec, under
`spec`) and the trainer (a whole manifest) name a bad field by the same path, as kubectl does."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubecua_api.errors import InvalidSpec, field_errors, validate_spec
from kubecua_api.trainingrun import TrainingRun, TrainingRunSpec

SPEC = {
    "model": {"path": "/m", "lora": {"targetModules": ["q_proj", "a b"]}},
    "sandboxes": {"poolRef": "desks"},
    "tasks": {"configMapRef": "tasks"},
    "steps": 3,
}
MANIFEST = {"apiVersion": "kubecua.dev/v1alpha1", "kind": "TrainingRun", "spec": SPEC}


def test_a_spec_and_its_manifest_name_the_same_path_with_its_list_index():
    with pytest.raises(InvalidSpec) as refused:
        validate_spec(TrainingRunSpec, SPEC)
    with pytest.raises(ValidationError) as whole:
        TrainingRun.model_validate(MANIFEST)
    path = "spec.model.lora.targetModules[1]"
    assert str(refused.value).startswith(f"{path}: String should match pattern")
    assert field_errors(whole.value, root="")[0].startswith(f"{path}: String should match pattern")


def test_inputs_add_the_refused_value_but_not_for_a_missing_field():
    with pytest.raises(ValidationError) as err:
        TrainingRunSpec.model_validate({**SPEC, "steps": -1, "tasks": None, "model": {}})
    lines = field_errors(err.value, inputs=True)
    assert "spec.model.path: Field required" in lines  # nothing was given: nothing to show
    assert "spec.steps: Input should be greater than or equal to 0 (got -1)" in lines
    assert not any("(got" in line for line in field_errors(err.value))  # a status message
