"""values.schema.json turns a wrong value into a clear `helm install` error that names the field,
and the chart's own values (and every documented variant) pass it."""

from __future__ import annotations

import os
import subprocess

import pytest

from kubecua_testkit.tools import REPO, binary, run

CHART = REPO / "charts" / "kubecua"


def template(*sets: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    args: list[str | os.PathLike[str]] = [binary("helm"), "template", "kubecua", CHART]
    for s in sets:
        args += ["--set", s]
    return run(args, check=check)


@pytest.mark.parametrize(
    ("setting", "field", "why"),
    [
        ("replicaCount=2", "replicaCount", "maximum"),
        ("rbac.scope=everywhere", "rbac.scope", "cluster"),
        ("image.tag=", "image.tag", "minLength"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy", "IfNotPresent"),
        ("metrics.port=70000", "metrics.port", "maximum"),
        ("prometheusRule.stalledFor=15 minutes", "prometheusRule.stalledFor", "pattern"),
        ("prometheusRule.entropyBelow=-1", "prometheusRule.entropyBelow", "minimum"),
        ("rbac.watchNamespaces={Team_A}", "rbac.watchNamespaces", "pattern"),
        ("serviceMonitr.enabled=true", "serviceMonitr", "not allowed"),
        ("crds.keep=maybe", "crds.keep", "boolean"),
    ],
)
def test_a_wrong_value_fails_with_the_field_and_the_reason(setting, field, why):
    proc = template(setting, check=False)
    assert proc.returncode != 0
    err = proc.stderr.lower()
    assert "values don't meet the specifications of the schema" in err
    assert field.split(".")[-1].lower() in err, proc.stderr
    assert why.lower() in err, proc.stderr


@pytest.mark.parametrize(
    "setting",
    [
        "replicaCount=0",
        "rbac.scope=namespace",
        "prometheusRule.stalledFor=30m",
        "operator.logLevel=debug",
        "serviceMonitor.labels.release=kube-prometheus-stack",
    ],
)
def test_documented_values_pass(setting):
    assert template(setting).returncode == 0
