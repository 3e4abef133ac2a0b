"""A task's declared partial credit (`partial` beside `evaluator`, the trainer's
spec.reward.partial) on a real local sandbox: scored with desktop-env's metric beside the
evaluator and never instead of it; a partial metric that fails leaves the score as it is and is
reported and counted; an unknown partial metric refuses the task with 422 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import LocalSandbox

# The desktop "typed" 'red aple' for 'red apple': the evaluator's exact match scores 0, the
# partial metric's text similarity is desktop-env's fuzzy_match, rapidfuzz's ratio / 100:
# 2 x 8 matching characters / (8 + 9) = 16/17 = 0.941176.
TYPED = {"type": "vm_command_line", "command": "printf 'red aple'", "shell": True}
EXPECTED = {"type": "rule", "rules": {"expected": "red apple"}}
TASK: dict[str, Any] = {
    "id": "partial-typing",
    "instruction": "Type 'red apple'.",
    "config": [],
    "evaluator": {"func": "exact_match", "result": TYPED, "expected": EXPECTED},
    "partial": {"func": "fuzzy_match", "result": TYPED, "expected": EXPECTED},
}
FAST = {"observation": {"format": "jpeg", "max_pixels": 57600}, "settle": {"max_seconds": 1.0}}


@pytest.fixture
def http(sandbox: LocalSandbox) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {sandbox.token}"}
    with httpx.Client(base_url=sandbox.url, headers=headers, timeout=120) as client:
        yield client


def _evaluate(http: httpx.Client, task: dict[str, Any]) -> dict[str, Any]:
    resp = http.post("/episodes", json={"task": task, **FAST})
    assert resp.status_code == 201, resp.text
    eid = resp.json()["episode_id"]
    try:
        got = http.post(f"/episodes/{eid}/evaluate")
        assert got.status_code == 200, got.text
        return dict(got.json())
    finally:
        assert http.delete(f"/episodes/{eid}").status_code == 200


def _partial_failures(http: httpx.Client) -> float:
    for line in httpx.get(str(http.base_url) + "/metrics").text.splitlines():
        if line.startswith("kubecua_sandbox_partial_failures_total "):
            return float(line.split()[-1])
    raise AssertionError("kubecua_sandbox_partial_failures_total not exported")


def test_partial_credit_is_scored_beside_the_evaluators_score(http: httpx.Client) -> None:
    got = _evaluate(http, TASK)
    assert got["score"] == 0.0  # success keeps its one definition
    assert got["partial"] == pytest.approx(16 / 17)
    assert got["partial_error"] is None


def test_a_task_without_partial_reports_none(http: httpx.Client) -> None:
    got = _evaluate(http, {k: v for k, v in TASK.items() if k != "partial"})
    assert (got["score"], got["partial"], got["partial_error"]) == (0.0, None, None)


def test_a_failing_partial_metric_leaves_the_score_and_is_counted(http: httpx.Client) -> None:
    before = _partial_failures(http)
    # fuzzy_match takes no options: the metric raises TypeError during the evaluation
    broken = {**TASK, "partial": {**TASK["partial"], "options": {"scale": 2}}}
    broken["evaluator"] = {
        **TASK["evaluator"],
        "expected": {"type": "rule", "rules": {"expected": "red aple"}},
    }
    got = _evaluate(http, broken)
    assert got["score"] == 1.0
    assert got["partial"] is None
    assert "TypeError" in got["partial_error"]
    assert "scale" in got["partial_error"]
    assert _partial_failures(http) == before + 1


@pytest.mark.parametrize(
    ("partial", "named"),
    [
        ({"func": "no_such_metric", "result": TYPED}, "task.partial.func: unknown metric"),
        ({"func": "fuzzy_match", "result": {"type": "nope"}}, "task.partial.result.type"),
        ("fuzzy_match", "task.partial must be an object"),
    ],
)
def test_a_bad_partial_entry_refuses_the_task_naming_it(
    http: httpx.Client, partial: Any, named: str
) -> None:
    resp = http.post("/episodes", json={"task": {**TASK, "partial": partial}, **FAST})
    assert resp.status_code == 422, resp.text
    assert resp.json()["reason"] == "InvalidTask"
    assert named in resp.json()["detail"]
    assert http.get("/readyz").status_code == 200  # nothing started, the sandbox stays free
