"""Request and response bodies: OSWorld's field names, validated with pydantic."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

Command = str | list[str]


class CommandRequest(BaseModel):
    """/execute, /setup/execute, /setup/launch: argv list, or a string (split unless shell)."""

    command: Command
    shell: bool = False

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: Command) -> Command:
        if not value or (isinstance(value, str) and not value.strip()):
            raise ValueError("command is empty")
        return value


class Verification(BaseModel):
    window_exists: str | None = None
    command_success: str | None = None


class VerifiedCommandRequest(CommandRequest):
    verification: Verification | None = None
    max_wait_time: float = Field(10.0, ge=0, le=600)
    check_interval: float = Field(1.0, gt=0, le=60)


class ExecuteResult(BaseModel):
    status: Literal["success", "error", "verification_failed"]
    output: str
    error: str
    returncode: int
    message: str | None = None
    verification: Literal["passed", "failed"] | None = None
    wait_time: float | None = None


class RunPythonRequest(BaseModel):
    code: str = Field(min_length=1)


class RunPythonResult(BaseModel):
    status: Literal["success", "error"]
    message: str
    need_more: bool = False
    output: str
    error: str
    return_code: int


class RunBashRequest(BaseModel):
    script: str = Field(min_length=1)
    timeout: float = Field(100.0, gt=0, le=3600)
    working_dir: str | None = None


class RunBashResult(BaseModel):
    status: Literal["success", "error"]
    output: str
    error: str = ""
    returncode: int


class PathRequest(BaseModel):
    path: str = Field(min_length=1)


class DownloadRequest(BaseModel):
    url: str = Field(pattern=r"^https?://")
    path: str = Field(min_length=1)


class WindowRequest(BaseModel):
    # No NUL: the name goes into wmctrl's argv, where NUL was a 500 (found by fuzzing).
    window_name: str = Field(min_length=1, pattern=r"^[^\x00]*$")
    strict: bool = False
    by_class: bool = False


class ScreenSize(BaseModel):
    width: int
    height: int
