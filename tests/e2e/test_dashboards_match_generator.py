"""The Grafana dashboards shipped in the chart are exactly what the grafana-foundation-sdk
generator (charts/kubecua-dashboards-gen) writes, and they hold the panels the issue asks for."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from kubecua_testkit.tools import REPO, run

GEN = REPO / "charts" / "kubecua-dashboards-gen"
SHIPPED = REPO / "charts" / "kubecua" / "dashboards"
PY = GEN / ".venv" / "bin" / "python"

REQUIRED_PANELS = {
    "kubecua-training.json": {
        "Reward mean and success rate", "Episodes by outcome", "Episode length",
        "KL and entropy", "Grad norm and clip fraction", "Advantage std and zero-variance groups",
        "Tokens per second", "Step time", "Checkpoint age",
        "Held-out success rate and pass@k", "Held-out success by task",
        "Evaluation episodes by outcome",
        "Cost per trajectory", "Money per successful trajectory", "Sandbox-hours leased",
    },
    "kubecua-fleet.json": {
        "Sandboxes by state per pool", "Step latency", "Reset latency",
        "Setup failures by reason", "Leased versus idle",
    },
    "kubecua-operator.json": {"Reconcile rate", "Reconcile errors", "Reconcile duration"},
}  # fmt: skip


@pytest.fixture(scope="module")
def generator():
    if not PY.exists():
        pytest.skip("charts/kubecua-dashboards-gen/.venv is missing: run `make dashboards-gen-env`")
    return PY


def test_shipped_json_equals_generated_output(generator):
    proc = run([generator, "-m", "kubecua_dashboards", "--check"], check=False)
    assert proc.returncode == 0, proc.stderr


def test_check_names_a_hand_edited_dashboard(generator, tmp_path):
    copy = tmp_path / "dashboards"
    shutil.copytree(SHIPPED, copy)
    edited = copy / "kubecua-fleet.json"
    edited.write_text(edited.read_text().replace("Reset latency", "Reset latency (edited)"))
    proc = run([generator, "-m", "kubecua_dashboards", "--check", "--out", copy], check=False)
    assert proc.returncode == 1
    assert "kubecua-fleet.json differs" in proc.stderr
    assert "kubecua-training.json" not in proc.stderr


def test_dashboards_hold_the_required_panels_each_with_a_query():
    assert {p.name for p in SHIPPED.glob("*.json")} == set(REQUIRED_PANELS)
    for name, titles in REQUIRED_PANELS.items():
        board = json.loads((SHIPPED / name).read_text())
        panels = [p for p in board["panels"] if p["type"] != "row"]
        assert titles <= {p["title"] for p in panels}
        assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels)
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        assert board["uid"] == name.removesuffix(".json")
        assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "namespace"]


def test_latency_panels_are_heatmaps_of_histogram_buckets():
    board = json.loads((SHIPPED / "kubecua-fleet.json").read_text())
    heatmaps = {p["title"]: p for p in board["panels"] if p["type"] == "heatmap"}
    assert set(heatmaps) == {"Step latency", "Reset latency"}
    for panel in heatmaps.values():
        (target,) = panel["targets"]
        assert target["format"] == "heatmap"
        assert "_bucket" in target["expr"]
        assert "sum by (le)" in target["expr"]


def test_every_panel_query_parses_as_promql(tmp_path):
    """promtool parses each query as a recording rule: a typo fails here, before any Prometheus."""
    if not shutil.which("promtool"):
        pytest.skip("promtool is missing: `make setup-apt` installs Debian's prometheus package")
    rules: list[dict] = []
    for path in sorted(SHIPPED.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$namespace", ".*")
                expr = expr.replace("$__rate_interval", "1m")
                rules.append({"record": f"panel:{len(rules)}", "expr": expr})
    (tmp_path / "panels.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "p", "rules": rules}]})
    )
    proc = run(["promtool", "check", "rules", tmp_path / "panels.yaml"], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout
