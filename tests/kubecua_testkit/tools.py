"""Where the binaries built by hack/build-control-plane.sh live, and how to call them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("KUBECUA_CACHE", Path.home() / ".cache" / "kubecua"))


def binary(name: str) -> Path:
    """Path of a cached binary; a clear error says how to build it when it is missing."""
    path = cache_dir() / "bin" / name
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `make setup-go` to build the control plane"
        )
    return path


def run(
    args: list[str | os.PathLike[str]],
    *,
    check: bool = True,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; on failure the error carries stderr."""
    proc = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        input=input,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        cmd = " ".join(str(a) for a in args)
        raise subprocess.CalledProcessError(
            proc.returncode, cmd, proc.stdout, f"{cmd}\n{proc.stderr}"
        )
    return proc
