"""spec.trainer.placement and generatingProcesses (issue 31 item 4): the models refuse what the
trainer cannot place, naming the field; the CRD's CEL rules say the same to the API server
(operator/tests/test_crd_validation.py covers the CRD side)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubecua_api.trainingrun import TrainerConfig, TrainingRunSpec

RUN = {
    "model": {"path": "/models/m"},
    "sandboxes": {"poolRef": "desks"},
    "tasks": {"configMapRef": "tasks"},
    "steps": 3,
}


def test_placement_defaults_to_colocated_without_generating_processes() -> None:
    spec = TrainingRunSpec.model_validate(RUN)
    assert (spec.trainer.placement, spec.trainer.generating_processes) == ("colocated", None)


@pytest.mark.parametrize(
    ("trainer", "field", "says"),
    [
        ({"placement": "disaggregated"}, "placement", "nodes x gpusPerNode gives 1"),
        ({"placement": "disaggregated", "gpusPerNode": 1}, "placement", "gives 1"),
        ({"nodes": 2, "generatingProcesses": 1}, "generatingProcesses", "only placement"),
        (
            {"placement": "disaggregated", "gpusPerNode": 2, "generatingProcesses": 2},
            "generatingProcesses",
            "at least one must learn",
        ),
        ({"placement": "split"}, "placement", "colocated"),
    ],
)
def test_a_placement_that_cannot_run_is_refused_naming_the_field(
    trainer: dict, field: str, says: str
) -> None:
    with pytest.raises(ValidationError) as err:
        TrainerConfig.model_validate(trainer)
    (e,) = err.value.errors()
    assert e["loc"] == (field,), e
    assert says in e["msg"], e


@pytest.mark.parametrize(
    "trainer",
    [
        {"placement": "disaggregated", "nodes": 2},
        {"placement": "disaggregated", "gpusPerNode": 4, "generatingProcesses": 3},
        {"placement": "colocated", "gpusPerNode": 4},
    ],
)
def test_placements_that_can_run_are_accepted(trainer: dict) -> None:
    cfg = TrainerConfig.model_validate(trainer)
    assert cfg.placement == trainer["placement"]
