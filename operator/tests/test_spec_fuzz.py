"""A slice of the spec fuzz (issue 42) in the normal suite: 150 hypothesis specs of each kind
against the real API server and the running operator (tests/spec_fuzz.py says how each is judged).
`make fuzz-specs` runs 2,000 of each (operator/bench/spec_fuzz.py).

Every refusal names a field path; every admitted spec is either reconciled or reported as
InvalidSpec naming its field; none is silent, none crashes the operator, and no admitted spec
asks for a child the API server then refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from .spec_fuzz import SpecFuzz
from .spec_strategies import pool_specs, run_specs

CASES = 150
FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    database=None,
    derandomize=True,  # the same specs every run: a failure here reproduces
    phases=[Phase.generate],  # each case is judged below, with its spec in the message
    suppress_health_check=list(HealthCheck),
)
STRATEGIES = {"SandboxPool": pool_specs, "TrainingRun": run_specs}


@pytest.mark.parametrize("kind", ["SandboxPool", "TrainingRun"])
def test_fuzzed_specs_are_refused_naming_a_field_or_answered_by_the_operator(
    kube: Any, operator: Any, namespace: str, kind: str
) -> None:
    fuzz = SpecFuzz(kube, namespace, operator.log_path)

    @FUZZ
    @given(STRATEGIES[kind]())
    def admit(spec: dict[str, Any]) -> None:
        fuzz.admit(kind, spec)

    admit()
    fuzz.judge_admitted()
    counts = fuzz.counts(kind)
    assert counts["cases"] == CASES
    # The slice reaches both sides of admission and the operator's both answers.
    assert counts["refused"] > 0, counts
    assert counts["admitted"] > 0, counts
    assert counts["reconciled"] > 0, counts
    assert fuzz.problems(kind) == [], counts


def test_the_strategies_draw_specs_of_every_backend_and_sandbox_source() -> None:
    seen: set[str] = set()

    @FUZZ
    @given(pool_specs(), run_specs())
    def draw(pool: dict[str, Any], run: dict[str, Any]) -> None:
        seen.add(f"backend:{pool.get('backend', 'pod')}")
        seen.update(f"source:{k}" for k in (run.get("sandboxes") or {}))

    draw()
    assert {"backend:pod", "backend:kubevirt", "backend:external"} <= seen
    assert {"source:poolRef", "source:urls", "source:local"} <= seen
