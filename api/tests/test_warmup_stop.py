"""spec.warmup.stopWhen: defaults, and the window's bounds refused with the field path."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubecua_api.trainingrun import WarmupConfig


def test_stop_when_defaults_are_the_issue_rule() -> None:
    cfg = WarmupConfig.model_validate({"demonstrations": "d.jsonl", "stopWhen": {}})
    rule = cfg.stop_when
    assert rule is not None
    assert (rule.greedy_pass_min, rule.greedy_pass_max, rule.k, rule.pass_at_k_min) == (
        0.2, 0.5, 8, 0.7,
    )  # fmt: skip
    assert WarmupConfig.model_validate({"demonstrations": "d.jsonl"}).stop_when is None


@pytest.mark.parametrize(
    ("rule", "where"),
    [
        ({"greedyPassMin": 0.6, "greedyPassMax": 0.5}, ("stopWhen",)),
        ({"k": 0}, ("stopWhen", "k")),
        ({"passAtKMin": 1.5}, ("stopWhen", "passAtKMin")),
        ({"everyEpochs": 0}, ("stopWhen", "everyEpochs")),
    ],
)
def test_bad_stop_when_is_refused_naming_the_field(rule: dict, where: tuple) -> None:
    with pytest.raises(ValidationError) as err:
        WarmupConfig.model_validate({"demonstrations": "d.jsonl", "stopWhen": rule})
    assert err.value.errors()[0]["loc"] == where
