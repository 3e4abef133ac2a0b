"""Per-object wake-up signals: child events wake the owner's reconcile loop early.

The loop still reconciles every resync period without any signal; a signal only shortens the wait,
so a lost or duplicated signal can never leave the world unreconciled.
"""

from __future__ import annotations

import asyncio

Key = tuple[str, str, str]  # (kind, namespace, name)
_events: dict[Key, asyncio.Event] = {}


def signal(kind: str, namespace: str, name: str) -> None:
    event = _events.get((kind, namespace, name))
    if event is not None:
        event.set()


async def wait(key: Key, timeout_s: float) -> bool:
    """Sleep until signalled or `timeout_s` passes; True when signalled."""
    event = _events.setdefault(key, asyncio.Event())
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
        return True
    except TimeoutError:
        return False
    finally:
        event.clear()


def register(key: Key) -> None:
    _events.setdefault(key, asyncio.Event())


def forget(key: Key) -> None:
    _events.pop(key, None)
