"""The spec fuzz at full size (issue 42): hypothesis SandboxPool and TrainingRun specs against the
real API server and the real operator, 2,000 of each by default; prints one JSON object of counts.

Starts its own local control plane (kubecua_testkit.cluster, 3 kwok nodes), installs the CRDs
(and KubeVirt's, as test data),
runs the operator as a subprocess, and judges every case as tests/spec_fuzz.py says: refused
naming a field, or admitted and then reconciled or reported as InvalidSpec naming a field; silent
outcomes, crashes and children the API server refuses are counted (and the first few printed).
tests/test_spec_fuzz.py runs a slice of 150 of each in the normal suite.

Run: make fuzz-specs   (or: cd operator && .venv/bin/python -m bench.spec_fuzz --cases 2000)
KUBECUA_KUBECONFIG=<kubeconfig> runs it against that cluster instead (left running).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from tests.conftest import DATA, REPO, OperatorProcess
from tests.spec_fuzz import SpecFuzz, problem_classes
from tests.spec_strategies import pool_specs, run_specs

from kubecua_operator.k8s import Kube
from kubecua_testkit.cluster import Cluster, down, up

STRATEGIES = {"SandboxPool": pool_specs, "TrainingRun": run_specs}


def fuzz(kube: Kube, log: Path, kind: str, cases: int, rng_seed: int) -> dict[str, Any]:
    namespace = f"fuzz-{kind.lower()}-{os.getpid()}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    f = SpecFuzz(kube, namespace, log, prefix="p" if kind == "SandboxPool" else "r")

    @seed(rng_seed)
    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(STRATEGIES[kind]())
    def admit(spec: dict[str, Any]) -> None:
        f.admit(kind, spec)

    start = time.monotonic()
    admit()
    admitted = time.monotonic()
    f.judge_admitted()
    done = time.monotonic()
    return {
        **f.counts(kind),
        "admission_seconds": round(admitted - start, 1),
        "operator_seconds": round(done - admitted, 1),
        "seconds": round(done - start, 1),
        "problem_classes": problem_classes(f.problems(kind)),
        "problems": f.problems(kind)[:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spec_fuzz")
    parser.add_argument("--cases", type=int, default=2000, help="specs of each kind")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    existing = os.environ.get("KUBECUA_KUBECONFIG")  # as the test fixture: use, never delete
    name = f"kubecua-fuzz-{os.getpid()}"
    cluster = Cluster("external", Path(existing)) if existing else up(name, nodes=3)
    try:
        # KubeVirt's CRDs as test data, as the operator's tests have them: kubevirt pools get
        # their VirtualMachines (never running: kwok has no KubeVirt).
        cluster.kubectl("apply", "-f", str(REPO / "crds"), "-f", str(DATA / "kubevirt-crds.yaml"))
        cluster.kubectl(
            "wait", "--for=condition=Established", "crd/sandboxpools.kubecua.dev",
            "crd/trainingruns.kubecua.dev", "crd/virtualmachines.kubevirt.io",
        )  # fmt: skip
        kube = Kube(cluster.api_client())
        work = Path(tempfile.mkdtemp())
        (work / "token.key").write_text(os.urandom(32).hex())
        log = work / "operator.log"
        env = {
            "KUBECUA_OPERATOR_TOKEN_KEY_FILE": str(work / "token.key"),
            "KUBECUA_OPERATOR_POLL_EPISODES": "false",  # kwok pods answer nothing
        }
        op = OperatorProcess(Path(cluster.kubeconfig), log, env)
        op.start()
        try:
            result: dict[str, Any] = {"cases_per_kind": args.cases, "seed": args.seed}
            for kind in STRATEGIES:
                result[kind] = fuzz(kube, log, kind, args.cases, args.seed)
                print(json.dumps({kind: result[kind]}), file=sys.stderr, flush=True)
            result["operator_alive"] = op.proc is not None and op.proc.poll() is None
        finally:
            op.stop()
        result["machine"] = f"{os.cpu_count()} cores"
        print(json.dumps(result))
    finally:
        if not existing:
            down(name)
    silent = sum(result[k]["silent"] + result[k]["crash"] for k in STRATEGIES)
    return 0 if silent == 0 and result["operator_alive"] else 1


if __name__ == "__main__":
    sys.exit(main())
