"""Async client of one episode server. Every failure maps to a typed error (errors.py):
409 -> SandboxBusy, other 4xx -> InvalidRequest, 5xx / timeout / connection -> SandboxUnavailable.

    async with SandboxClient("http://127.0.0.1:8000", token) as sb:
        ep = await sb.start_episode(task)
        res = await sb.step(ep.episode_id, "pyautogui.click(10, 10)")
        score = (await sb.evaluate(ep.episode_id)).score
        await sb.release(ep.episode_id)
"""

from __future__ import annotations

import functools
import ssl
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from kubecua_sandbox_client.errors import InvalidRequest, SandboxBusy, SandboxUnavailable
from kubecua_sandbox_client.models import (
    ActionSpace,
    EpisodeCreate,
    EpisodeStarted,
    Evaluation,
    ObservationOptions,
    Readiness,
    Released,
    SandboxStatus,
    SettleOptions,
    StepRequest,
    StepResult,
)

M = TypeVar("M", bound=BaseModel)


def _error_for(resp: httpx.Response) -> Exception:
    try:
        body = resp.json()
        detail, reason = body.get("detail", resp.text), body.get("reason", "")
    except ValueError:
        detail, reason = resp.text, ""
    msg = f"{resp.request.method} {resp.request.url.path}: HTTP {resp.status_code}: {detail}"
    if resp.status_code == 409:
        return SandboxBusy(msg, resp.status_code, reason or "SandboxBusy")
    if resp.status_code < 500:
        return InvalidRequest(msg, resp.status_code, reason)
    return SandboxUnavailable(msg, resp.status_code, reason)


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every client of the process, made as httpx makes its default (the
    certifi bundle, SSL_CERT_FILE / SSL_CERT_DIR honoured). httpx otherwise builds one per client,
    loading the CA bundle each time, http:// servers included: about 25 ms and 0.8 MiB a client
    (sandbox-image/tasks/bench/bench_leasing.py, 2026-11-29: 1,000 clients took 40 s and 810 MiB
    before the first lease), paid by every episode since the trainer opens a client per episode.
    An SSLContext may be shared by any number of connections and threads."""
    return httpx.create_ssl_context()


class SandboxClient:
    """One episode server. `timeout` caps each call (setup and evaluation included)."""

    def __init__(self, base_url: str, token: str | None, timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
            verify=shared_ssl_context(),
        )

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, json: Any = None) -> httpx.Response:
        try:
            return await self._http.request(method, path, json=json)
        except httpx.TimeoutException as e:
            raise SandboxUnavailable(f"{method} {path}: timed out ({e!r})", None, "Timeout") from e
        except httpx.TransportError as e:
            raise SandboxUnavailable(f"{method} {path}: {e!r}", None, "Unreachable") from e

    async def _call(self, method: str, path: str, model: type[M], json: Any = None) -> M:
        resp = await self._send(method, path, json)
        if resp.status_code >= 400:
            raise _error_for(resp)
        try:
            return model.model_validate_json(resp.content)  # one pass: no dict of the PNG first
        except (ValueError, ValidationError) as e:
            raise SandboxUnavailable(f"{method} {path}: bad response body: {e}") from e

    async def start_episode(
        self,
        task: dict[str, Any],
        observation: ObservationOptions | None = None,
        settle: SettleOptions | None = None,
        episode_id: str | None = None,
    ) -> EpisodeStarted:
        """`episode_id`: choose the id (see EpisodeCreate); `release(episode_id)` then works even
        if this call was cancelled before the reply came."""
        body = EpisodeCreate(
            task=task,
            observation=observation or ObservationOptions(),
            settle=settle or SettleOptions(),
            episode_id=episode_id,
        )
        return await self._call("POST", "/episodes", EpisodeStarted, body.model_dump())

    async def step(
        self, episode_id: str, action: str | dict[str, Any], action_space: ActionSpace = "pyautogui"
    ) -> StepResult:
        body = StepRequest(action=action, action_space=action_space).model_dump()
        return await self._call("POST", f"/episodes/{episode_id}/step", StepResult, body)

    async def evaluate(self, episode_id: str) -> Evaluation:
        return await self._call("POST", f"/episodes/{episode_id}/evaluate", Evaluation)

    async def release(self, episode_id: str) -> Released:
        return await self._call("DELETE", f"/episodes/{episode_id}", Released)

    async def status(self) -> SandboxStatus:
        return await self._call("GET", "/status", SandboxStatus)

    async def ready(self) -> Readiness:
        """Never raises: an unreachable or failing server is simply not ready."""
        try:
            resp = await self._send("GET", "/readyz")
            return Readiness.model_validate(resp.json())
        except (SandboxUnavailable, ValueError, ValidationError) as e:
            return Readiness(ready=False, busy=False, reason=f"Unreachable: {e}")
