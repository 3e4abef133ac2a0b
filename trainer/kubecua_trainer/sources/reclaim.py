"""Free the sandboxes an earlier attempt of the same run left holding episodes.

A trainer that dies mid-episode (a SIGKILLed rank, an OOM, a lost node) cannot release its
episodes, and the episode server keeps each one busy until its idle watchdog gives up on it
(KUBECUA_IDLE_TIMEOUT_SECONDS, 10 minutes by default). The Job's next pod would then find its own
predecessor's episodes in its way: a one-process rerun on the suite's two desktops waited out a
whole test limit (CI, 2026-11-28) for two episodes nobody would ever call again.

So every episode a run starts carries its run's mark in its id (`owner_of`, a hash of the run's
namespace and name: ids are 8-64 of [A-Za-z0-9._-]), and a run that starts asks each ready
sandbox what it holds (GET /status) and releases the episodes with its own mark. It does so
before its processes' first collective (train.py), so no episode of this attempt can exist yet
on any rank: whatever carries the mark is an earlier attempt's. Episodes of other runs are left
alone; they get a 409 as before. A sandbox that cannot be asked or released is skipped with a
warning: its watchdog still frees it, reclaiming only makes that sooner.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from kubecua_sandbox_client import SandboxClient
from kubecua_sandbox_client.errors import SandboxError

log = logging.getLogger(__name__)


def owner_of(name: str, namespace: str | None) -> str:
    """The mark of a run's episode ids: stable across its attempts, distinct between runs."""
    digest = hashlib.sha256(f"{namespace or 'default'}/{name}".encode()).hexdigest()
    return f"kc{digest[:10]}"


def episode_id(owner: str, kind: str, unique: str) -> str:
    """An episode id that names its run: `{owner}-{kind}-{unique}`."""
    return f"{owner}-{kind}-{unique}" if owner else f"{kind}-{unique}"


async def reclaim(
    urls: list[str], token: str | None, owner: str, call_seconds: float = 60.0
) -> list[str]:
    """Release, on each sandbox, an episode whose id carries `owner`'s mark; the ids released."""

    async def one(url: str) -> str | None:
        async with SandboxClient(url, token, call_seconds) as client:
            try:
                held = (await client.status()).episode_id
                if held is None or not held.startswith(f"{owner}-"):
                    return None
                await client.release(held)  # answers once the desktop is reset
            except SandboxError as err:
                # 404/409: gone or going meanwhile (its watchdog, or another rank of this run)
                if err.status not in (404, 409):
                    log.warning("could not reclaim %s: %s", url, err)
                return None
            log.warning(
                "released episode %s on %s: an earlier attempt of this run left it", held, url
            )
            return held

    found = await asyncio.gather(*(one(u) for u in urls))
    return [ep for ep in found if ep is not None]
