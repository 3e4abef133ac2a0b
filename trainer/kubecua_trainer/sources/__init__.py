"""Where sandboxes come from. Each source reports ready episode-server URLs to SandboxLeases.

- static: a fixed list of URLs, polled on /readyz;
- local: N desktops started here with `kubecua-sandbox-local`, stopped on exit;
- pool: a SandboxPool's EndpointSlices, watched by label in the cluster.
`build_source(spec, ...)` picks one from the spec's `sandboxes` block. Static and pool sources
get their bearer token from `resolve_token` (tokenSecretRef, else the environment); local
sandboxes make their own random token, so a tokenSecretRef does not apply to them.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any, Protocol

from kubecua_sandbox_client import read_token
from kubecua_trainer.config import ConfigError, SandboxesConfig
from kubecua_trainer.sources.leases import Lease, SandboxLeases


class SandboxSource(Protocol):
    token: str | None

    async def start(self, leases: SandboxLeases) -> None: ...
    async def stop(self) -> None: ...


log = logging.getLogger(__name__)


def secret_token(name: str, namespace: str, api: Any = None) -> str:
    """The `token` key of Secret namespace/name, read through the kubernetes client (in-cluster
    service account or kubeconfig). Raises LookupError saying why it could not be read."""
    from kubernetes import client, config

    from kubecua_trainer.telemetry.status import core_v1_api

    try:
        secret = core_v1_api(api).read_namespaced_secret(name, namespace)
    except config.ConfigException as err:
        raise LookupError(f"no cluster access ({err})") from None
    except client.ApiException as err:
        raise LookupError(f"secret {namespace}/{name}: HTTP {err.status} {err.reason}") from None
    raw = (secret.data or {}).get("token")
    if not raw:
        raise LookupError(f"secret {namespace}/{name} has no key `token`")
    return base64.b64decode(raw).decode().strip()


def resolve_token(cfg: SandboxesConfig, namespace: str | None, api: Any = None) -> str | None:
    """The sandbox bearer token: sandboxes.tokenSecretRef's Secret when it can be read, else
    $KUBECUA_SANDBOX_TOKEN(_FILE) (e.g. the operator's mounted copy when the trainer may not read
    Secrets). A tokenSecretRef with neither raises ConfigError; no ref and no env gives None."""
    if cfg.token_secret_ref is None:
        return read_token()
    try:
        return secret_token(cfg.token_secret_ref, namespace or "default", api)
    except LookupError as err:
        fallback = read_token()
        if fallback is None:
            raise ConfigError(f"spec.sandboxes.tokenSecretRef: {err}") from None
        log.warning("sandbox token from the environment: tokenSecretRef unreadable: %s", err)
        return fallback


def build_source(cfg: SandboxesConfig, workdir: str, namespace: str | None) -> SandboxSource:
    # Imported here so a static run never imports the kubernetes client.
    if cfg.urls is not None:
        from kubecua_trainer.sources.static import StaticSource

        return StaticSource(cfg.urls, resolve_token(cfg, namespace))
    if cfg.local is not None:
        from kubecua_trainer.sources.local import LocalSource

        return LocalSource(cfg.local.replicas, Path(workdir) / "sandboxes")
    from kubecua_trainer.sources.kube import PoolSource

    assert cfg.pool_ref is not None  # the config allows exactly one of the three
    return PoolSource(cfg.pool_ref, namespace or "default", resolve_token(cfg, namespace))


__all__ = [
    "Lease",
    "SandboxLeases",
    "SandboxSource",
    "build_source",
    "resolve_token",
]
