"""Bearer-token check applied to every route (see Settings.trust_loopback for the one exception)."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status

LOOPBACK = {"127.0.0.1", "::1"}


async def require_token(request: Request) -> None:
    """FastAPI dependency: 401 unless the request carries the configured bearer token. Async:
    it never blocks, and a sync dependency costs a threadpool hop on every request."""
    settings = request.app.state.settings
    client = request.client.host if request.client else ""
    if settings.trust_loopback and client in LOOPBACK:
        return
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    token = settings.token
    if token and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip(), token):
        return
    raise HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED,
        detail="missing or wrong bearer token: send 'Authorization: Bearer <token>'",
        headers={"WWW-Authenticate": "Bearer"},
    )
