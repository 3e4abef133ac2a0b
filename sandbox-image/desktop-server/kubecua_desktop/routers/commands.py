"""Commands: /execute, /setup/execute, /execute_with_verification, /setup/launch, /run_*."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse

from kubecua_desktop import commands
from kubecua_desktop.deps import get_desktop, get_launcher, get_settings, get_warm
from kubecua_desktop.desktop import Desktop
from kubecua_desktop.models import (
    CommandRequest,
    RunBashRequest,
    RunPythonRequest,
    VerifiedCommandRequest,
)
from kubecua_desktop.procs import Launcher
from kubecua_desktop.settings import Settings
from kubecua_desktop.warm import WarmPython

router = APIRouter()
SettingsDep = Annotated[Settings, Depends(get_settings)]
WarmDep = Annotated[WarmPython | None, Depends(get_warm)]


def _json(result: tuple[int, object]) -> JSONResponse:
    code, body = result
    return JSONResponse(body.model_dump(exclude_none=True), status_code=code)  # type: ignore[attr-defined]


@router.post("/execute")
@router.post("/setup/execute")
def execute(req: CommandRequest, settings: SettingsDep, warm: WarmDep) -> JSONResponse:
    return _json(commands.execute(req, settings.command_timeout_s, warm))


@router.post("/execute_with_verification")
@router.post("/setup/execute_with_verification")
def execute_with_verification(
    req: VerifiedCommandRequest,
    settings: SettingsDep,
    desktop: Annotated[Desktop, Depends(get_desktop)],
    warm: WarmDep,
) -> JSONResponse:
    return _json(commands.execute_verified(req, desktop, settings.command_timeout_s, warm))


@router.post("/setup/launch", response_class=PlainTextResponse)
def launch(req: CommandRequest, launcher: Annotated[Launcher, Depends(get_launcher)]) -> str:
    try:
        launcher.launch(req.command, shell=req.shell, env=None)
    except OSError as exc:
        raise HTTPException(400, f"cannot launch: {exc}") from exc
    shown = req.command if isinstance(req.command, str) else " ".join(req.command)
    return f"{shown} launched successfully"


@router.post("/run_python")
def run_python(req: RunPythonRequest, settings: SettingsDep) -> JSONResponse:
    return _json(commands.run_python(req, settings.python, settings.python_timeout_s))


@router.post("/run_bash_script")
def run_bash_script(req: RunBashRequest) -> JSONResponse:
    return _json(commands.run_bash(req))
