"""The chart's alert rules pass `promtool check rules`, and `promtool test rules` shows each alert
firing on the series that should fire it and staying quiet on healthy ones (real promtool from
Debian's prometheus package)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from kubecua_testkit.tools import REPO, binary, run

CHART = REPO / "charts" / "kubecua"
NS = "kubecua-system"


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory):
    if not shutil.which("promtool"):
        pytest.skip("promtool is missing: `make setup-apt` installs Debian's prometheus package")
    out = run([
        binary("helm"), "template", "kubecua", CHART, "-n", NS,
        "--set", "prometheusRule.enabled=true,prometheusRule.stalledFor=15m",
        "--show-only", "templates/prometheusrule.yaml",
    ]).stdout  # fmt: skip
    rule = yaml.safe_load(out)
    path = tmp_path_factory.mktemp("rules") / "kubecua-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_promtool_check_rules_accepts_every_rule(rules_file):
    proc = run(["promtool", "check", "rules", rules_file])
    assert "SUCCESS: 6 rules found" in proc.stdout


def series(name: str, values: str) -> dict:
    return {"series": name, "values": values}


def alert(name: str, at: str, fired: list[dict]) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": fired}


def fired(labels: dict, summary: str, description: str) -> list[dict]:
    """One firing alert with its labels and its rendered annotations (templates included)."""
    exp = {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description},
    }
    return [exp]


# Each case: input series (promtool's expanding notation: "a+bxN" is a, a+b, ... N more samples
# one interval apart) and which alerts must fire, with their labels, at a time.
TESTS = [
    {  # step stuck at 7 for 20 minutes: stalled; a progressing run is not.
        "interval": "1m",
        "input_series": [
            series('kubecua_trainer_step{namespace="ml", pod="stuck"}', "7x40"),
            series('kubecua_trainer_step{namespace="ml", pod="moving"}', "0+1x40"),
        ],
        "alert_rule_test": [
            alert("KubecuaTrainingRunStalled", "10m", []),
            alert("KubecuaTrainingRunStalled", "20m", fired(
                {"namespace": "ml", "pod": "stuck", "severity": "warning"},
                "TrainingRun trainer ml/stuck made no step progress for 15m.",
                "Step is stuck at 7. Check the trainer's logs, its sandboxes (kubecua / Fleet "
                "dashboard) and its rollout engine.",
            )),
        ],
    },
    {  # entropy falls from 2 to 0.05 and stays: collapsed after 10 minutes below 0.1.
        "interval": "1m",
        "input_series": [series('kubecua_trainer_entropy{namespace="ml", pod="t"}', "2x5 0.05x30")],
        "alert_rule_test": [
            alert("KubecuaRewardCollapsed", "10m", []),
            alert("KubecuaRewardCollapsed", "20m", fired(
                {"namespace": "ml", "pod": "t", "severity": "warning"},
                "Policy entropy of ml/t is below 0.1.",
                "Token entropy is 0.05; the policy is collapsing. Lower the learning rate or "
                "resume from an earlier checkpoint.",
            )),
        ],
    },
    {  # 3 ready (1 of them leased) against minReady 4: degraded; pool b has enough.
        "interval": "1m",
        "input_series": [
            series('kubecua_pool_sandboxes{namespace="ml", pool="a", state="ready"}', "3x20"),
            series('kubecua_pool_sandboxes{namespace="ml", pool="a", state="leased"}', "1x20"),
            series('kubecua_pool_min_ready{namespace="ml", pool="a"}', "4x20"),
            series('kubecua_pool_sandboxes{namespace="ml", pool="b", state="ready"}', "4x20"),
            series('kubecua_pool_min_ready{namespace="ml", pool="b"}', "4x20"),
        ],
        "alert_rule_test": [
            alert("KubecuaPoolDegraded", "3m", []),
            alert("KubecuaPoolDegraded", "10m", fired(
                {"namespace": "ml", "pool": "a", "severity": "warning"},
                "SandboxPool ml/a has fewer ready sandboxes than its runs' minReady.",
                "Only 3 sandboxes are ready (leased included). See `kubectl describe "
                "sandboxpool` for its conditions.",
            )),
        ],
    },
    {  # one failed reset a minute: more than 3 in 15 minutes.
        "interval": "1m",
        "input_series": [
            series(
                'kubecua_sandbox_reset_failures_total{namespace="ml", kubecua_dev_pool="a"}',
                "0+1x20",
            ),
        ],
        "alert_rule_test": [
            alert("KubecuaSandboxResetFailuresRising", "2m", []),
            alert("KubecuaSandboxResetFailuresRising", "16m", fired(
                {"namespace": "ml", "kubecua_dev_pool": "a", "severity": "warning"},
                "Sandboxes of pool ml/a fail to reset.",
                "15 resets failed verification in 15 minutes; those sandboxes are quarantined.",
            )),
        ],
    },
    {  # the operator's target goes down at minute 5: alert after operatorDownFor (5m).
        "interval": "1m",
        "input_series": [series(f'up{{job="kubecua-operator", namespace="{NS}"}}', "1x5 0x20")],
        "alert_rule_test": [
            alert("KubecuaOperatorDown", "4m", []),
            alert("KubecuaOperatorDown", "8m", []),
            alert("KubecuaOperatorDown", "12m", fired(
                {"severity": "critical"},
                f"The kubecua operator in {NS} is not being scraped successfully.",
                "No SandboxPool or TrainingRun is reconciled while it is down.",
            )),
        ],
    },
]  # fmt: skip


def test_each_alert_fires_on_its_symptom_and_not_on_healthy_series(rules_file, tmp_path):
    spec = {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": TESTS}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run(["promtool", "test", "rules", path], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
