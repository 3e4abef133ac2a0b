"""The operator parses a TrainingRun's spec once per pass into kubecua_api's TrainingRunSpec.

A spec the API server stored but the model refuses (an object stored under an older schema, or a
rule the CRD's schema cannot say, such as the placeholders of rollout.systemPrompt) fails the run
naming the field, posts an Event and builds nothing; the operator goes on with its other runs.
"""

from __future__ import annotations

import pytest

from kubecua_api.errors import InvalidSpec
from kubecua_operator.trainingrun.model import parse
from kubecua_operator.trainingrun.status import Observed, compute_run_status

from .conftest import wait_until
from .helpers import condition
from .test_trainingrun_lifecycle import run_manifest, wait_phase

STATIC = {"urls": ["http://desk.example:8000"]}  # no pool to wait for


def test_parse_names_every_field_it_refuses_and_the_run_fails_with_them():
    body = run_manifest("ns", sandboxes=STATIC, trainer={"nodes": 0, "gpus": 1})
    body["metadata"]["generation"] = 2
    with pytest.raises(InvalidSpec) as err:
        parse(body)
    assert str(err.value) == (
        "spec.trainer.nodes: Input should be greater than or equal to 1; "
        "spec.trainer.gpus: Extra inputs are not permitted"
    )
    st = compute_run_status(body, None, Observed(None, None, invalid=str(err.value)), "T0")
    assert (st["phase"], st["completionTime"], st["observedGeneration"]) == ("Failed", "T0", 2)
    failed = condition(st, "Failed")
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True", "InvalidSpec", str(err.value),
    )  # fmt: skip
    assert condition(st, "Progressing")["status"] == "False"
    assert {c["type"] for c in st["conditions"]} == {"Progressing", "Failed"}


def test_a_stored_spec_the_model_refuses_fails_the_run_and_the_operator_goes_on(
    kube, operator, namespace
):
    # Admitted: the CRD's schema cannot check a template's placeholders; the model does.
    kube.create(run_manifest(namespace, sandboxes=STATIC, rollout={"systemPrompt": "Click {x}"}))
    failed = condition(wait_phase(kube, namespace, "Failed"), "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert failed["message"].startswith(
        "spec.rollout.systemPrompt: Value error, only {width} and {height} may be substituted"
    )
    events = wait_until(  # Events follow the status write
        lambda: [e for e in kube.list("Event", namespace) if e["reason"] == "Failed"], 30
    )
    assert (events[0]["type"], events[0]["message"]) == ("Warning", failed["message"])
    good = run_manifest(namespace, sandboxes=STATIC)
    good["metadata"]["name"] = "good"
    kube.create(good)
    wait_until(lambda: kube.get("Job", namespace, "good-trainer"), 60, "the good run's Job")
    for kind, name in [
        ("ConfigMap", "qwen-config"),
        ("Role", "qwen-trainer"),
        ("Job", "qwen-trainer"),
    ]:
        assert kube.get(kind, namespace, name) is None, kind  # nothing built for the refused run
