"""Bearer-token check applied to every route (see Settings.trust_loopback for the one exception)."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

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


class TokenFirst:
    """ASGI middleware: the same check before routing and body parsing. The route dependency
    alone runs after FastAPI has read the body, so a caller without the token got 422 or 400
    for a malformed body (learning the route's shape) instead of 401; found by fuzzing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                await require_token(Request(scope))
            except HTTPException as e:
                refusal = JSONResponse({"detail": e.detail}, e.status_code, headers=e.headers)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
