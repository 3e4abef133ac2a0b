"""Async client and wire models of the kubecua episode API (docs/episode-api.md)."""

from kubecua_sandbox_client.client import SandboxClient
from kubecua_sandbox_client.errors import (
    InvalidRequest,
    SandboxBusy,
    SandboxError,
    SandboxUnavailable,
)
from kubecua_sandbox_client.fingerprint import SAME_SCREEN_BITS, same_start, starts_agree
from kubecua_sandbox_client.models import (
    SPECIAL_ACTIONS,
    EpisodeCreate,
    EpisodeStarted,
    ErrorBody,
    Evaluation,
    Observation,
    ObservationOptions,
    Readiness,
    Released,
    SandboxStatus,
    SettleOptions,
    StartFingerprint,
    StepRequest,
    StepResult,
)
from kubecua_sandbox_client.success import SUCCESS_SCORE, is_success
from kubecua_sandbox_client.token import TokenError, read_token

__all__ = [
    "SAME_SCREEN_BITS",
    "SPECIAL_ACTIONS",
    "SUCCESS_SCORE",
    "EpisodeCreate",
    "EpisodeStarted",
    "ErrorBody",
    "Evaluation",
    "InvalidRequest",
    "Observation",
    "ObservationOptions",
    "Readiness",
    "Released",
    "SandboxBusy",
    "SandboxClient",
    "SandboxError",
    "SandboxStatus",
    "SandboxUnavailable",
    "SettleOptions",
    "StartFingerprint",
    "StepRequest",
    "StepResult",
    "TokenError",
    "is_success",
    "read_token",
    "same_start",
    "starts_agree",
]
