"""Operator settings from the environment, and kopf's start-up settings.

kopf keeps its bookkeeping in annotations prefixed with our group (never in a foreign domain), its
finalizer is ours, and API errors are retried with backoff instead of crashing handlers.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import kopf
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob, read once from KUBECUA_OPERATOR_<NAME> environment variables."""

    model_config = SettingsConfigDict(env_prefix="KUBECUA_OPERATOR_")

    # The names hack/build-images.sh gives (no registry); the chart sets the same.
    sandbox_image: str = Field(
        "localhost/kubecua/sandbox:dev", description="Default sandbox pod image."
    )
    trainer_image: str = Field(
        "localhost/kubecua/trainer:dev", description="Default trainer image."
    )
    tasks_image: str = Field(
        "localhost/kubecua/tasks:dev",
        description="Default TaskVerification image (kubecua-tasks and the built-in families).",
    )
    sglang_image: str = Field("lmsysorg/sglang:v0.5.3", description="sglang server image.")
    resync_seconds: float = Field(10.0, gt=0, description="Reconcile at least this often.")
    poll_seconds: float = Field(2.0, gt=0, description="Episode-server poll period.")
    debounce_seconds: float = Field(0.2, ge=0, description="Coalesce bursts of child events.")
    poll_episodes: bool = Field(True, description="Poll episode servers for leases/episodes.")
    poll_timeout_seconds: float = Field(0.5, gt=0, description="Per episode-server request.")
    poll_concurrency: int = Field(64, ge=1, description="Episode servers polled at once.")
    create_burst: int = Field(32, ge=1, description="Unready sandboxes allowed at any time, min.")
    api_concurrency: int = Field(32, ge=1, description="Concurrent API writes.")
    failure_backoff_seconds: float = Field(5.0, ge=0, description="First replacement delay.")
    failure_backoff_max_seconds: float = Field(300.0, ge=0, description="Longest delay.")
    unschedulable_grace_seconds: float = Field(0.0, ge=0, description="Before ScalingLimited.")
    metrics_port: int = Field(8080, ge=0, le=65535, description="Operator /metrics; 0 is off.")
    metrics_host: str = Field("0.0.0.0", description="Bind address of /metrics.")
    namespace: str = Field(
        "", description="The operator's own namespace (its pods' NetworkPolicy peer); default: "
        "the in-cluster service account's, else kubecua-system."
    )  # fmt: skip
    token_key_file: str = Field(
        "", description="Key the pool tokens are derived from (the chart mounts a Secret); "
        "default ~/.cache/kubecua/operator-token.key, made on first use."
    )  # fmt: skip
    relist_seconds: float = Field(
        60.0, gt=0, description="Each pool re-lists its children this often (cache check)."
    )
    api_grace_seconds: float = Field(
        30.0, gt=0, description="Liveness fails after the API is unreachable this long."
    )
    watch_timeout_seconds: int = Field(
        300, gt=0, description="Each watch request ends after this long and is made again."
    )
    watch_backoff_max_seconds: float = Field(
        10.0, gt=0, description="Longest wait before a failed watch lists and watches again."
    )
    event_interval_seconds: float = Field(
        300.0, ge=0, description="The same Event about one object at most this often."
    )


@lru_cache(maxsize=1)
def get() -> Settings:
    return Settings()


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = "kubecua.dev/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubecua.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kubecua.dev", key="last-handled-configuration"
    )
    # At most 5 s between attempts: a broken watch resumes within 5 s of the API answering again
    # (it was 30 s, and the pools' view of their children lagged the world as long).
    settings.networking.error_backoffs = [1, 2, 3, 5, 5]
    # A failed watch is started again by watches.py, for as long as the operator runs.
    cfg = get()
    settings.watching.server_timeout = cfg.watch_timeout_seconds
    settings.watching.client_timeout = cfg.watch_timeout_seconds + 30
    settings.posting.level = logging.WARNING  # our own Events; kopf's per-handler ones are noise
    settings.execution.max_workers = 32
