"""Typed client errors. The trainer's rule (docs/episode-api.md): SandboxUnavailable is an
infrastructure failure and the episode is excluded from the loss, never trained as reward 0."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class; `status` is the HTTP code (None when no response came back)."""

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class SandboxBusy(SandboxError):
    """409: the sandbox already runs an episode (or the episode is already done)."""


class InvalidRequest(SandboxError):
    """Any other 4xx: the request was wrong; retrying it unchanged will not help."""


class SandboxUnavailable(SandboxError):
    """5xx, timeout or connection failure: the sandbox (not the policy) failed."""
