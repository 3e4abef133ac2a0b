"""The FastAPI application: settings, desktop, routers, auth on every route, error mapping."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from kubecua_desktop.auth import TokenFirst, require_token
from kubecua_desktop.desktop import Desktop, DesktopUnavailable, make_desktop
from kubecua_desktop.procs import Launcher
from kubecua_desktop.recorder import Recorder
from kubecua_desktop.routers import commands, files, recording, screen, windows
from kubecua_desktop.settings import Settings
from kubecua_desktop.warm import WarmPython

log = logging.getLogger("kubecua_desktop")


async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path)
    return JSONResponse({"detail": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)


def create_app(settings: Settings, desktop: Desktop | None = None) -> FastAPI:
    settings.validate_token()
    desktop = desktop or make_desktop(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if app.state.warm is not None:
            # Before serving: the episode server's reset baseline (taken once the desktop answers)
            # must include the zygote, or every reset would kill it as an episode's leftover.
            await asyncio.to_thread(app.state.warm.start)
        yield
        app.state.recorder.abort()
        app.state.launcher.stop_all()
        if app.state.warm is not None:
            app.state.warm.stop()

    app = FastAPI(title="kubecua desktop", lifespan=lifespan, dependencies=[Depends(require_token)])
    app.add_middleware(TokenFirst)
    app.state.settings = settings
    app.state.desktop = desktop
    app.state.launcher = Launcher()
    app.state.warm = WarmPython() if settings.warm_python else None
    app.state.recorder = Recorder(desktop, settings.recording_dir)
    for module in (screen, commands, files, windows, recording):
        app.include_router(module.router)
    app.add_exception_handler(DesktopUnavailable, _unavailable)
    app.add_exception_handler(Exception, _unexpected)
    return app
