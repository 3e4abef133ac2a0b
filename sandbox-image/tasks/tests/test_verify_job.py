"""kubecua_tasks.verify_job, a TaskVerification's verifier (the operator's Job): verify's exit
status passes through, and the manifest verify wrote lands in the ConfigMap on a real API server
(kubecua_testkit's local control plane). `kubecua tasks verify` itself is stood in for (its own
tests play real desktops: test_verify.py, test_verify_pool.py): here it writes a manifest, or
exits 2 as it does on bad input. A few seconds after the control plane's start."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from kubecua_tasks import cli, verify_job
from kubernetes import client

from kubecua_api.taskmanifest import VerifiedManifest
from kubecua_testkit.cluster import Cluster

MANIFEST = VerifiedManifest.model_validate({
    "created": "2026-11-29T10:00:00Z", "folder": "/t", "content_hash": "sha256:1",
    "sandboxes": ["http://10.0.0.1:8000"], "repeats": 2, "seconds": 3.5,
    "summary": {"verified": 1, "usable": 1, "unreproducible-start": 0},
    "tasks": [{"id": "a", "path": "a.json", "digest": "sha256:0", "verdict": "verified",
               "reproducible_start": True, "scores": {"reference": [1.0, 1.0]}, "seconds": 3.5,
               "episodes": []}],
})  # fmt: skip


@pytest.fixture
def config_map(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    core = client.CoreV1Api(cluster.api_client())
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="ck-manifest"))
    core.create_namespaced_config_map("default", body)
    yield lambda: core.read_namespaced_config_map("ck-manifest", "default").data
    core.delete_namespaced_config_map("ck-manifest", "default")


def stand_in(code: int) -> Any:
    """`kubecua`'s main as verify behaves: the manifest at --manifest, then exit `code`."""

    def main(argv: list[str]) -> None:
        if code == 0:
            Path(argv[argv.index("--manifest") + 1]).write_text(MANIFEST.model_dump_json())
        sys.exit(code)

    return main


def args(tmp_path: Path, config_map: str = "ck-manifest") -> list[str]:
    return ["--config-map", config_map, "--namespace", "default", "--", "tasks", "verify",
            str(tmp_path), "--pool", "desks", "--manifest", str(tmp_path / "v.json")]  # fmt: skip


def test_the_manifest_goes_into_the_config_map(config_map, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "main", stand_in(0))
    assert verify_job.main(args(tmp_path)) == 0
    data = config_map()
    assert json.loads(data["verified.json"])["tasks"][0]["id"] == "a"


def test_a_failed_verify_exits_as_it_did_and_writes_nothing(config_map, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "main", stand_in(2))
    assert verify_job.main(args(tmp_path)) == 2
    assert not config_map()


def test_a_config_map_it_cannot_write_fails_the_job_saying_so(
    config_map, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(cli, "main", stand_in(0))
    assert verify_job.main(args(tmp_path, "gone-manifest")) == 1
    assert "could not be written into ConfigMap default/gone-manifest" in capsys.readouterr().err
