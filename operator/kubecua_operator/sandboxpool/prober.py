"""Polls episode servers: readiness and busy from GET /readyz, episodes served from GET /status.

This is how the pool knows which sandboxes are leased without an API write per episode. Timeouts
are short and a sandbox that does not answer is simply not ready and not busy (kwok pods have IPs
that nothing listens on), so polling can slow nothing but itself.
"""

from __future__ import annotations

import asyncio

import httpx

from kubecua_operator.sandboxpool.model import Probe


async def probe_one(http: httpx.AsyncClient, url: str, token: str, want_status: bool) -> Probe:
    try:
        ready = await http.get(f"{url.rstrip('/')}/readyz")
        body = _json(ready)
        probe = Probe(ready=ready.status_code == 200, busy=bool(body.get("busy", False)))
        if want_status and token:
            status = await http.get(
                f"{url.rstrip('/')}/status", headers={"Authorization": f"Bearer {token}"}
            )
            served = int(_json(status).get("episodes_served", 0) or 0)
            probe = Probe(probe.ready, probe.busy, served)
        return probe
    except (httpx.HTTPError, ValueError):
        return Probe(ready=False, busy=False)


async def probe_all(
    targets: dict[str, str],
    token: str,
    want_status: bool,
    timeout_s: float,
    concurrency: int,
) -> dict[str, Probe]:
    """Probe every `name -> url` at most `concurrency` at a time."""
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as http:

        async def one(name: str, url: str) -> tuple[str, Probe]:
            async with gate:
                return name, await probe_one(http, url, token, want_status)

        results = await asyncio.gather(*(one(n, u) for n, u in targets.items()))
    return dict(results)


def _json(response: httpx.Response) -> dict:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
