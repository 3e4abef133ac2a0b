"""The warm-up stage of a run (pipeline.py). STUB: the warm-up helper replaces it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubecua_trainer.train import Loop


async def warm_up_if_needed(lp: Loop) -> None:
    return None
