"""Skip a test module, saying why, when the local control plane's binaries are not built."""

from __future__ import annotations

import pytest

from kubecua_testkit.tools import cache_dir

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
)


def require_control_plane() -> None:
    missing = [b for b in BINARIES if not (cache_dir() / "bin" / b).exists()]
    if missing:
        pytest.skip(
            f"control plane not built ({', '.join(missing)} missing): run `make setup-go`",
            allow_module_level=True,
        )
