"""spec.evaluation.beforeWarmup: off by default, accepted with a warm-up, refused without one
naming its own path, for the operator (a spec) and the trainer (a manifest) alike; the CRD's CEL
rule says the same to the API server (operator/tests/test_crd_validation.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubecua_api.errors import InvalidSpec, field_errors, validate_spec
from kubecua_api.trainingrun import TrainingRun, TrainingRunSpec

SPEC = {
    "model": {"path": "/m"},
    "sandboxes": {"poolRef": "desks"},
    "tasks": {"configMapRef": "tasks"},
    "evaluation": {"tasks": {"path": "/held-out"}, "beforeWarmup": True},
    "warmup": {"demonstrations": "/demos.jsonl"},
    "steps": 3,
}
SAYS = "it needs spec.warmup"


def test_before_warmup_is_off_by_default_and_accepted_with_a_warm_up() -> None:
    plain = validate_spec(TrainingRunSpec, {**SPEC, "evaluation": {"tasks": {"path": "/h"}}})
    assert plain.evaluation is not None
    assert plain.evaluation.before_warmup is False
    spec = validate_spec(TrainingRunSpec, SPEC)
    assert spec.evaluation is not None
    assert spec.evaluation.before_warmup is True


def test_before_warmup_without_a_warm_up_is_refused_naming_its_path() -> None:
    no_warmup = {k: v for k, v in SPEC.items() if k != "warmup"}
    with pytest.raises(InvalidSpec) as refused:
        validate_spec(TrainingRunSpec, no_warmup)
    assert str(refused.value).startswith("spec.evaluation.beforeWarmup: evaluates the starting")
    assert SAYS in str(refused.value)
    manifest = {"apiVersion": "kubecua.dev/v1alpha1", "kind": "TrainingRun", "spec": no_warmup}
    with pytest.raises(ValidationError) as whole:
        TrainingRun.model_validate(manifest)
    (line,) = field_errors(whole.value, root="", inputs=True)
    assert line.startswith("spec.evaluation.beforeWarmup: evaluates the starting"), line
    assert line.endswith("(got True)"), line
    # false needs nothing
    off = {**no_warmup, "evaluation": {"tasks": {"path": "/h"}, "beforeWarmup": False}}
    assert validate_spec(TrainingRunSpec, off).warmup is None
