"""The evaluation stage of a run (pipeline.py). STUB: the evaluation helper replaces it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubecua_trainer.train import Loop


async def evaluate_if_due(lp: Loop, step: int) -> None:
    return None
