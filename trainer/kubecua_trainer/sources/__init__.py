"""Where sandboxes come from. Each source reports ready episode-server URLs to SandboxLeases.

- static: a fixed list of URLs, polled on /readyz;
- local: N desktops started here with `kubecua-sandbox-local`, stopped on exit;
- pool: a SandboxPool's EndpointSlices, watched by label in the cluster.
`build_source(spec, ...)` picks one from the spec's `sandboxes` block.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from kubecua_trainer.config import SandboxesConfig
from kubecua_trainer.sources.leases import Lease, SandboxLeases


class SandboxSource(Protocol):
    token: str | None

    async def start(self, leases: SandboxLeases) -> None: ...
    async def stop(self) -> None: ...


def token_from_env() -> str | None:
    """The sandbox bearer token: $KUBECUA_SANDBOX_TOKEN or the file $KUBECUA_SANDBOX_TOKEN_FILE."""
    if token := os.environ.get("KUBECUA_SANDBOX_TOKEN"):
        return token.strip()
    if path := os.environ.get("KUBECUA_SANDBOX_TOKEN_FILE"):
        return Path(path).read_text().strip()
    return None


def build_source(cfg: SandboxesConfig, workdir: str, namespace: str | None) -> SandboxSource:
    # Imported here so a static run never imports the kubernetes client.
    if cfg.urls is not None:
        from kubecua_trainer.sources.static import StaticSource

        return StaticSource(cfg.urls, token_from_env())
    if cfg.local is not None:
        from kubecua_trainer.sources.local import LocalSource

        return LocalSource(cfg.local.replicas, Path(workdir) / "sandboxes")
    from kubecua_trainer.sources.kube import PoolSource

    assert cfg.pool_ref is not None  # the config allows exactly one of the three
    return PoolSource(cfg.pool_ref, namespace or "default", token_from_env())


__all__ = ["Lease", "SandboxLeases", "SandboxSource", "build_source", "token_from_env"]
