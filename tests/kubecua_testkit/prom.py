"""Queries against a real Prometheus's HTTP API, for the tests that scrape the stack."""

from __future__ import annotations

from typing import Any

import httpx


def query(api: str, expr: str, at: float) -> dict[str, Any]:
    """An instant query's `data` at time `at`."""
    r = httpx.get(f"{api}/api/v1/query", params={"query": expr, "time": at}, timeout=30)
    assert r.status_code == 200, f"{expr}: {r.text}"
    return dict(r.json()["data"])


def query_range(api: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    """A range query's series, one sample a second."""
    params: dict[str, str | float] = {"query": expr, "start": start, "end": end, "step": "1s"}
    r = httpx.get(f"{api}/api/v1/query_range", params=params, timeout=30)
    assert r.status_code == 200, f"{expr}: {r.text}"
    return list(r.json()["data"]["result"])
