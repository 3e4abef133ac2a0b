"""Engines behind one interface (base.Engine); build_engine picks one by rollout.engine."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from kubecua_trainer.engines.base import Engine, EngineError, Generation, SamplingParams

if TYPE_CHECKING:
    from kubecua_trainer.config import RolloutConfig
    from kubecua_trainer.model import Policy
    from kubecua_trainer.parallel.gpu_share import GpuShare

__all__ = ["Engine", "EngineError", "Generation", "SamplingParams", "build_engine"]


def _hf(cfg: Any, policy: Policy, share: GpuShare | None = None) -> Engine:
    from kubecua_trainer.engines.hf import HFEngine

    # CUDA graphs wherever there is CUDA: eager decoding of a 3B model is bound by the host's
    # kernel launches (docs/benchmarks.md); a failed capture falls back to eager decoding.
    return HFEngine(
        policy,
        max_batch_size=min(64, cfg.max_in_flight_episodes),
        cuda_graphs=policy.device.type == "cuda",
        share=share,
    )


def sglang_urls(cfg: Any) -> list[str]:
    """rollout.sglangUrls, else the operator's own servers: its Job sets KUBECUA_SGLANG_URLS
    (comma-separated) when it runs them (spec.rollout.sglangUrls unset)."""
    if cfg.sglang_urls:
        return list(cfg.sglang_urls)
    env = os.environ.get("KUBECUA_SGLANG_URLS", "")
    return [by_service_env(u.strip()) for u in env.split(",") if u.strip()]


def by_service_env(url: str) -> str:
    """The operator names its sglang Service by its DNS name. Where that name does not resolve
    (a cluster without cluster DNS), the kubelet's service environment variables still give its
    address: <NAME>_SERVICE_HOST, set for every Service of the namespace that existed when the
    pod started (Kubernetes' other documented discovery mechanism; the Service is made before
    the trainer's Job)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host or "." in host:
        return url
    try:
        socket.getaddrinfo(host, None)
        return url
    except OSError:
        ip = os.environ.get(f"{host.upper().replace('-', '_')}_SERVICE_HOST")
    if not ip:
        return url
    return urlunsplit(parts._replace(netloc=f"{ip}:{parts.port}" if parts.port else ip))


def _sglang(cfg: Any, policy: Policy, share: GpuShare | None = None) -> Engine:
    from kubecua_trainer.engines.sglang import READY_TIMEOUT_S, SGLangEngine

    urls = sglang_urls(cfg)
    if not urls:
        raise ValueError(
            "rollout.engine sglang needs rollout.sglangUrls (or KUBECUA_SGLANG_URLS, which the "
            "operator sets for the servers it runs)"
        )
    # The operator starts the servers with the trainer: wait for them before the first request.
    return SGLangEngine(urls, policy.image_pad_id, ready_timeout_s=READY_TIMEOUT_S)


ENGINES: dict[str, Callable[[Any, Policy, GpuShare | None], Engine]] = {
    "hf": _hf,
    "sglang": _sglang,  # its servers' GPUs are their own: nothing to share
}


def build_engine(cfg: RolloutConfig, policy: Policy, share: GpuShare | None = None) -> Engine:
    """The engine that cfg.engine names; share: the GPU it shares with the learner
    (gpu_share.py), for the embedded engine."""
    try:
        factory = ENGINES[cfg.engine]
    except KeyError:
        raise ValueError(
            f"rollout.engine must be one of {sorted(ENGINES)}, got {cfg.engine!r}"
        ) from None
    return factory(cfg, policy, share)
