"""Engines behind one interface (base.Engine); build_engine picks one by rollout.engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kubecua_trainer.engines.base import Engine, EngineError, Generation, SamplingParams

if TYPE_CHECKING:
    from kubecua_trainer.model import Policy

__all__ = ["Engine", "EngineError", "Generation", "SamplingParams", "build_engine"]


def _hf(cfg: Any, policy: Policy) -> Engine:
    from kubecua_trainer.engines.hf import HFEngine

    return HFEngine(policy, max_batch_size=min(64, cfg.max_in_flight_episodes))


def _sglang(cfg: Any, policy: Policy) -> Engine:
    from kubecua_trainer.engines.sglang import SGLangEngine

    if not cfg.sglang_urls:
        raise ValueError("rollout.engine sglang needs rollout.sglangUrls")
    return SGLangEngine(cfg.sglang_urls, policy.image_pad_id)


ENGINES: dict[str, Callable[[Any, Policy], Engine]] = {"hf": _hf, "sglang": _sglang}


def build_engine(cfg: Any, policy: Policy) -> Engine:
    """cfg is a RolloutConfig; the engine kind comes from cfg.engine."""
    try:
        factory = ENGINES[cfg.engine]
    except KeyError:
        raise ValueError(
            f"rollout.engine must be one of {sorted(ENGINES)}, got {cfg.engine!r}"
        ) from None
    return factory(cfg, policy)
