"""`make bench-tasks-leasing` at 20 sandboxes (bench/bench_leasing.py, its smoke run): the pool's
Services and slices on the real API server (kubecua_testkit's control plane), discovered and
followed as `--pool` does, 120 episodes against the stand-in episode server. Checks the figures
it prints hold together, not their speed: every sandbox used, the two made ready late included,
no sandbox leased twice at once, every verdict `verified`. About 15 s with a running cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kubecua_testkit.cluster import Cluster

BENCH = Path(__file__).resolve().parents[1] / "bench/bench_leasing.py"


def test_leasing_benchmark_smoke_uses_every_sandbox_once_at_a_time(
    cluster: Cluster, namespace: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--sandboxes", "20", "--late", "2",
         "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert (out["discovery"]["urls"], out["discovery"]["foreign_slices"]) == (20, 0)
    assert out["ready_at_start"] == 18
    assert out["late"]["episodes"]["sandboxes"] == 2
    assert out["late"]["episodes"]["min"] >= 1
    assert (out["episodes"], out["leases"], out["sandboxes_used"]) == (120, 120, 20)
    assert (out["double_leases"], out["still_held"], out["unknown_sandboxes"]) == (0, 0, [])
    assert out["verdicts"] == {"verified": 20}
