"""Fixtures for the operator's tests on the real control plane (kwok nodes, no kubelet).

`crds`: our CRDs (and KubeVirt's, as test data) installed and Established.
`operator`: the operator as a real subprocess (`python -m kubecua_operator`), cluster-wide, with
short resync and backoff so tests finish fast; `operator.restart(kill=True)` SIGKILLs it.
`kube`: the operator's own REST helper bound to the test cluster (reads and patches in tests).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubecua_operator.k8s import Kube

pytest_plugins = ["kubecua_testkit.fixtures"]

OPERATOR_DIR = Path(__file__).resolve().parents[1]
REPO = OPERATOR_DIR.parent
DATA = Path(__file__).parent / "data"
TEST_SETTINGS = {
    "KUBECUA_OPERATOR_RESYNC_SECONDS": "2",
    "KUBECUA_OPERATOR_POLL_SECONDS": "0.5",
    "KUBECUA_OPERATOR_POLL_TIMEOUT_SECONDS": "0.3",
    "KUBECUA_OPERATOR_FAILURE_BACKOFF_SECONDS": "1",
    "KUBECUA_OPERATOR_CREATE_BURST": "4",
    "KUBECUA_OPERATOR_DEBOUNCE_SECONDS": "0.05",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll `check` until it returns something truthy; the API has no push for most of these."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class OperatorProcess:
    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str]) -> None:
        self.kubeconfig, self.log_path, self.extra_env = kubeconfig, log_path, extra_env
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = self.health_port = 0

    def start(self) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        env = {
            **os.environ,
            **TEST_SETTINGS,
            **self.extra_env,
            "KUBECONFIG": str(self.kubeconfig),
            "KUBECUA_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "KUBECUA_OPERATOR_METRICS_HOST": "127.0.0.1",
        }
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubecua_operator",
                "--liveness",
                f"http://127.0.0.1:{self.health_port}/healthz",
            ],
            cwd=OPERATOR_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._healthy, 90, "the operator's liveness endpoint")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"operator exited: see {self.log_path}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1).is_success
        except httpx.HTTPError:
            return False

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def restart(self, kill: bool = False) -> None:
        self.stop(kill)
        self.start()

    def scrape(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def metric(self, name: str, **labels: str) -> float:
        """Sum of one metric's samples whose labels include `labels`."""
        text = self.scrape()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def reconciles(self, kind: str) -> float:
        return self.metric("kubecua_operator_reconcile_total", kind=kind)


@pytest.fixture(scope="session")
def crds(cluster: Any) -> None:
    cluster.kubectl("apply", "-f", str(REPO / "crds"), "-f", str(DATA / "kubevirt-crds.yaml"))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/sandboxpools.kubecua.dev",
        "crd/trainingruns.kubecua.dev",
        "crd/virtualmachines.kubevirt.io",
    )


@pytest.fixture(scope="session")
def kube(cluster: Any) -> Kube:
    return Kube(cluster.api_client())


@pytest.fixture(scope="session")
def token_key(tmp_path_factory: Any) -> Path:
    """The key pool tokens are derived from; one per session, kept across operator restarts."""
    path = tmp_path_factory.mktemp("key") / "token.key"
    path.write_text(os.urandom(32).hex())
    return path


@pytest.fixture(scope="session")
def operator(
    cluster: Any, crds: None, tmp_path_factory: Any, token_key: Path
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {"KUBECUA_OPERATOR_TOKEN_KEY_FILE": str(token_key)}
    proc = OperatorProcess(Path(cluster.kubeconfig), log, env)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
