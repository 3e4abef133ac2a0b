"""The client against a tiny real FastAPI server speaking the episode API's wire format: typed
results on success, and each failure class mapped to its typed error."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from kubecua_sandbox_client import (
    InvalidRequest,
    SandboxBusy,
    SandboxClient,
    SandboxUnavailable,
)

TOKEN = "t0ken"
OBS = {"screenshot": "iVBORw0=", "format": "png", "width": 4, "height": 3, "step": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app() -> FastAPI:
    app = FastAPI()
    state: dict[str, Any] = {"busy": False}

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        if request.url.path != "/readyz" and request.headers.get("authorization") != (
            f"Bearer {TOKEN}"
        ):
            return JSONResponse({"detail": "bad token", "reason": "Unauthorized"}, 401)
        return await call_next(request)

    @app.post("/episodes", status_code=201)
    async def start(body: dict[str, Any]) -> Any:
        if state["busy"]:
            return JSONResponse({"detail": "busy", "reason": "SandboxBusy"}, 409)
        state["busy"] = True
        return {
            "episode_id": "ep-1",
            "instruction": body["task"]["instruction"],
            "observation": OBS,
        }

    @app.post("/episodes/{eid}/step")
    async def step(eid: str, body: dict[str, Any]) -> Any:
        if body["action"] == "crash":
            return JSONResponse({"detail": "desktop died", "reason": "DesktopError"}, 502)
        if body["action"] == "slow":
            await asyncio.sleep(5)
        return {"observation": {**OBS, "step": 1}, "done": body["action"] == "DONE", "info": {}}

    @app.post("/episodes/{eid}/evaluate")
    async def evaluate(eid: str) -> Any:
        if eid != "ep-1":
            return JSONResponse({"detail": "no such episode", "reason": "UnknownEpisode"}, 404)
        return {"score": 0.5, "details": {"metric": "exact_match"}}

    @app.delete("/episodes/{eid}")
    async def release(eid: str) -> Any:
        state["busy"] = False
        return {"reset_seconds": 0.25, "clean": True}

    @app.get("/readyz")
    async def readyz() -> Any:
        return JSONResponse({"ready": not state["busy"], "busy": state["busy"]}, 200)

    @app.get("/status")
    async def status() -> Any:
        return {"ready": True, "busy": state["busy"], "episode_id": None,
                "episodes_served": 3, "last_reset_seconds": 0.25}  # fmt: skip

    return app


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(_app(), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # set by uvicorn once the socket listens
        threading.Event().wait(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


async def test_episode_round_trip_returns_typed_models(server_url: str) -> None:
    async with SandboxClient(server_url, TOKEN) as sb:
        ep = await sb.start_episode({"id": "t", "instruction": "do it"})
        assert (ep.episode_id, ep.instruction, ep.observation.width) == ("ep-1", "do it", 4)
        res = await sb.step(ep.episode_id, "DONE")
        assert res.done
        assert res.observation.step == 1
        assert (await sb.evaluate(ep.episode_id)).score == 0.5
        assert (await sb.status()).busy
        released = await sb.release(ep.episode_id)
        assert released.clean
        assert released.reset_seconds == 0.25


async def test_second_episode_raises_busy(server_url: str) -> None:
    async with SandboxClient(server_url, TOKEN) as sb:
        ep = await sb.start_episode({"instruction": "a"})
        with pytest.raises(SandboxBusy) as e:
            await sb.start_episode({"instruction": "b"})
        assert e.value.status == 409
        assert e.value.reason == "SandboxBusy"
        assert not (await sb.ready()).ready
        await sb.release(ep.episode_id)
        assert (await sb.ready()).ready


async def test_4xx_raises_invalid_request(server_url: str) -> None:
    async with SandboxClient(server_url, "wrong") as sb:
        with pytest.raises(InvalidRequest) as e:
            await sb.status()
        assert e.value.status == 401
    async with SandboxClient(server_url, TOKEN) as sb:
        with pytest.raises(InvalidRequest) as e:
            await sb.evaluate("ep-404")
        assert (e.value.status, e.value.reason) == (404, "UnknownEpisode")


async def test_infrastructure_failures_raise_unavailable(server_url: str) -> None:
    async with SandboxClient(server_url, TOKEN, timeout=0.5) as sb:
        with pytest.raises(SandboxUnavailable) as e:
            await sb.step("ep-1", "crash")
        assert (e.value.status, e.value.reason) == (502, "DesktopError")
        with pytest.raises(SandboxUnavailable) as e:
            await sb.step("ep-1", "slow")
        assert e.value.reason == "Timeout"
    async with SandboxClient(f"http://127.0.0.1:{_free_port()}", TOKEN) as sb:
        with pytest.raises(SandboxUnavailable) as e:
            await sb.status()
        assert e.value.reason == "Unreachable"
        readiness = await sb.ready()
        assert not readiness.ready
        assert "Unreachable" in (readiness.reason or "")
