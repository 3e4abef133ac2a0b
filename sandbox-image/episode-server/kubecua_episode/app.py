"""HTTP layer of the episode server: thin routes over Sandbox, bearer auth, body-size limit, and
every error as {"detail", "reason"} with a 4xx/5xx code. docs/episode-api.md is the contract."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from kubecua_episode import evaluators
from kubecua_episode.desktop import DesktopError, authorize_requests_to
from kubecua_episode.metrics import Metrics
from kubecua_episode.sandbox import ApiError, Sandbox
from kubecua_episode.settings import Settings
from kubecua_sandbox_client import (
    EpisodeCreate,
    EpisodeStarted,
    Evaluation,
    Released,
    SandboxStatus,
    StepRequest,
    StepResult,
)

log = logging.getLogger("kubecua.episode")
OPEN_PATHS = {"/healthz", "/readyz", "/metrics"}


def _error(status: int, reason: str, detail: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, "reason": reason}, status_code=status)


async def _wait_for_desktop(sb: Sandbox) -> None:
    """Take the clean baseline as soon as the desktop answers (it may start after us)."""
    while not sb.started:
        try:
            await asyncio.to_thread(sb.take_baseline)
        except DesktopError:
            await asyncio.sleep(0.5)


async def _release_idle_episodes(sb: Sandbox) -> None:
    """Idle-timeout watchdog: checks a few times per timeout period (at least every 5 s)."""
    period = min(5.0, max(0.1, sb.s.idle_timeout_s / 4))
    while sb.s.idle_timeout_s > 0:
        await asyncio.sleep(period)
        try:
            await sb.release_if_idle()
        except Exception:  # the watchdog must outlive a failed reset (it shows as NotClean)
            log.exception("idle release failed")


def build_app(settings: Settings) -> FastAPI:
    if not settings.token:
        raise SystemExit("no token: set KUBECUA_SANDBOX_TOKEN or KUBECUA_SANDBOX_TOKEN_FILE")
    authorize_requests_to(settings.desktop_url, settings.token)
    metrics = Metrics()
    sb = Sandbox(settings, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        evaluators.preload()  # seconds of imports, off the event loop, before the first evaluate
        tasks = [asyncio.create_task(_wait_for_desktop(sb)),
                 asyncio.create_task(_release_idle_episodes(sb))]  # fmt: skip
        yield
        for task in tasks:
            task.cancel()

    app = FastAPI(title="kubecua episode server", lifespan=lifespan)
    app.state.sandbox = sb

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Any:
        if request.url.path not in OPEN_PATHS:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token, settings.token):
                return _error(401, "Unauthorized", "send 'Authorization: Bearer <token>'")
        length = request.headers.get("content-length")
        if length and (not length.isdigit() or int(length) > settings.max_body_bytes):
            return _error(413, "PayloadTooLarge", f"body over {settings.max_body_bytes} bytes")
        return await call_next(request)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.reason, e.detail)

    @app.exception_handler(RequestValidationError)
    async def bad_body(_: Request, e: RequestValidationError) -> JSONResponse:
        return _error(422, "InvalidRequest", jsonable_errors(e))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, "InternalError", f"{type(e).__name__}: {e}")

    _routes(app, sb, metrics)
    return app


def jsonable_errors(e: RequestValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(err.get("loc", ())), "msg": err.get("msg", "")} for err in e.errors()]


def _model_json(model: BaseModel, status_code: int = 200) -> Response:
    """pydantic's own JSON for replies that carry a screenshot: FastAPI's path (validate again,
    jsonable_encoder, json.dumps) cost ~1.5 ms a step on a 1920x1080 PNG, a tenth of a step."""
    return Response(model.model_dump_json(), status_code, media_type="application/json")


def _routes(app: FastAPI, sb: Sandbox, metrics: Metrics) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        r = await sb.readiness()
        return JSONResponse(r.model_dump(), status_code=200 if r.ready else 503)

    @app.get("/status")
    async def status() -> SandboxStatus:
        return sb.status((await sb.readiness()).ready)

    @app.post("/episodes", status_code=201, response_model=EpisodeStarted)
    async def start(body: EpisodeCreate) -> Response:
        return _model_json(await sb.start(body), 201)

    @app.post("/episodes/{episode_id}/step", response_model=StepResult)
    async def step(episode_id: str, body: StepRequest) -> Response:
        return _model_json(await sb.step(episode_id, body))

    @app.post("/episodes/{episode_id}/evaluate")
    async def evaluate(episode_id: str) -> Evaluation:
        return await sb.evaluate(episode_id)

    @app.delete("/episodes/{episode_id}")
    async def release(episode_id: str) -> Released:
        return await sb.release(episode_id)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
