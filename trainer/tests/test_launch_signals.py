"""The pod launcher and a SIGTERM that arrives before any worker started.

A pod of a multi-node Job waits in torchrun's static rendezvous until every pod has joined; that
wait is in C++ and does not return to Python. A suspend or an eviction in that wait must still
stop the pod at once with the "stopped" code 143 (nothing ran, nothing to save), not leave it to
be killed at the end of its grace period."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from test_distributed_learner import TRAINER_DIR
from test_metrics import free_port


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"no rendezvous store on :{port}"
            time.sleep(0.1)  # polling a port: there is no event to wait on


def test_sigterm_in_the_rendezvous_exits_stopped_at_once(tmp_path: Path) -> None:
    port = free_port()
    # The Job's static rendezvous (operator/kubecua_operator/trainingrun/job.py sets these PET_*
    # variables): two nodes expected, node 0 started alone, so it hosts the store and waits.
    env = {**os.environ, "PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "1",
           "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}  # fmt: skip
    cmd = [sys.executable, "-m", "kubecua_trainer.launch",
           "--module", "kubecua_trainer", "run", str(tmp_path / "never-read.yaml")]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=TRAINER_DIR, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        wait_listening(port, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)  # the rendezvous would wait far longer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-3000:]
    assert "SIGTERM before any worker started" in err
