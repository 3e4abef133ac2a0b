"""Wire models of the episode API (docs/episode-api.md). Shared by the episode server and the
trainer, so a field changes in one place. Only pydantic: the trainer imports this without the
episode server's heavy dependencies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ActionSpace = Literal["pyautogui", "computer_13"]
# Special actions that end or pause an episode without touching the desktop (OSWorld's names).
SPECIAL_ACTIONS = ("DONE", "FAIL", "WAIT")


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObservationOptions(_Wire):
    """What each observation carries and how the screenshot is encoded."""

    format: Literal["png", "jpeg"] = "png"
    max_pixels: int | None = Field(
        default=None, ge=64 * 64, description="resize so width*height <= this; null = full size"
    )
    jpeg_quality: int = Field(default=90, ge=10, le=100)
    a11y_tree: bool = False
    terminal: bool = False


class SettleOptions(_Wire):
    """Adaptive wait after an action: done when `stable_frames` consecutive screenshots match,
    never before `min_seconds`, never after `max_seconds`. Two frames "match" when the box
    around every changed pixel covers at most `ignore_area_pixels` (a blinking text cursor is
    about 2x20 = 40 pixels); 0 asks for byte-identical frames."""

    min_seconds: float = Field(default=0.1, ge=0.0, le=10.0)
    max_seconds: float = Field(default=3.0, ge=0.0, le=30.0)
    stable_frames: int = Field(default=2, ge=1, le=20)
    interval_seconds: float = Field(default=0.05, ge=0.01, le=1.0)
    ignore_area_pixels: int = Field(
        default=400, ge=0, le=100_000, description="changes within a box this small are noise"
    )
    done_min_seconds: float = Field(
        default=0.5,
        ge=0.0,
        le=10.0,
        description="DONE/FAIL settle for at least this long: an app may still be saving while "
        "its window looks still, and evaluation reads the files right after",
    )


EPISODE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{7,63}$"


class EpisodeCreate(_Wire):
    """Body of POST /episodes: an OSWorld task config plus observation and settle options."""

    task: dict[str, Any]
    observation: ObservationOptions = ObservationOptions()
    settle: SettleOptions = SettleOptions()
    episode_id: str | None = Field(
        default=None,
        pattern=EPISODE_ID_PATTERN,
        description="the caller's id for the episode (8 to 64 of A-Z a-z 0-9 . _ -); null: the "
        "server picks one. Knowing the id before the reply, a caller that gives up on a slow "
        "start can still release the episode with DELETE",
    )


class Observation(_Wire):
    screenshot: str = Field(description="base64 of the encoded image")
    format: Literal["png", "jpeg"]
    width: int
    height: int
    a11y_tree: str | None = None
    terminal: str | None = None
    step: int


class StartFingerprint(_Wire):
    """What the episode started from, to compare starts without the screenshots: episodes of one
    GRPO group, or one task's repeats when it is verified (kubecua_sandbox_client.fingerprint
    compares two)."""

    screen: str = Field(
        description="perceptual hash (dHash, 16x16 bits, hex) of the first settled screenshot at"
        " full size: equal screens hash alike, and a small change (a cursor) moves few bits"
    )
    a11y: str | None = Field(
        default=None,
        description="sha256 of the first accessibility tree; null unless the observation asked"
        " for the tree",
    )


class EpisodeStarted(_Wire):
    episode_id: str
    instruction: str
    observation: Observation
    setup_seconds: float = 0.0
    start_fingerprint: StartFingerprint | None = Field(
        default=None, description="null from a server older than the field"
    )


class StepRequest(_Wire):
    """An action: pyautogui code, a computer_13 dict, or DONE / FAIL / WAIT."""

    action: str | dict[str, Any]
    action_space: ActionSpace = "pyautogui"


class StepResult(_Wire):
    observation: Observation
    done: bool
    info: dict[str, Any] = {}


class Evaluation(_Wire):
    score: float = Field(ge=0.0, le=1.0)
    details: dict[str, Any] = {}
    partial: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="the task's declared partial credit (its `partial` metric, clamped to 0..1);"
        " null when the task declares none or the metric failed. Never part of score or success",
    )
    partial_error: str | None = Field(
        default=None, description="why the partial metric failed; null when it ran or is absent"
    )


class Released(_Wire):
    reset_seconds: float
    clean: bool


class Readiness(_Wire):
    ready: bool
    busy: bool
    reason: str | None = None


class SandboxStatus(_Wire):
    ready: bool
    busy: bool
    episode_id: str | None
    episodes_served: int
    last_reset_seconds: float | None


class ErrorBody(BaseModel):
    """Every error response: what is wrong and what to do, plus a CamelCase reason."""

    detail: Any
    reason: str = "Error"
