"""What the command routes do: /execute, verification, /run_python, /run_bash_script.

Each function returns (HTTP status, body). A timeout is 504 with the usual body and a message;
a command that cannot start (not found, not executable) is 400.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from fastapi import HTTPException, status

from kubecua_desktop.desktop import Desktop
from kubecua_desktop.models import (
    CommandRequest,
    ExecuteResult,
    RunBashRequest,
    RunBashResult,
    RunPythonRequest,
    RunPythonResult,
    Verification,
    VerifiedCommandRequest,
)
from kubecua_desktop.procs import CommandResult, run_command
from kubecua_desktop.warm import WarmPython

TIMEOUT = status.HTTP_504_GATEWAY_TIMEOUT


def _start(command: str | list[str], **kwargs: object) -> CommandResult:
    try:
        return run_command(command, **kwargs)  # type: ignore[arg-type]
    except OSError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"cannot start command: {exc}") from exc


def _as_execute(result: CommandResult, timeout: float) -> tuple[int, ExecuteResult]:
    body = ExecuteResult(
        status="error" if result.timed_out else "success",
        output=result.output,
        error=result.error,
        returncode=result.returncode,
    )
    if result.timed_out:
        body.message = f"command timed out after {timeout:g} s; its process group was killed"
        return TIMEOUT, body
    return status.HTTP_200_OK, body


def _run(req: CommandRequest, timeout: float, warm: WarmPython | None) -> CommandResult:
    """desktop-env's pyautogui actions go to the warm executor when they may; the rest cold."""
    result = warm.run_command(req.command, req.shell, timeout) if warm is not None else None
    return result if result is not None else _start(req.command, shell=req.shell, timeout=timeout)


def execute(
    req: CommandRequest, timeout: float, warm: WarmPython | None = None
) -> tuple[int, ExecuteResult]:
    return _as_execute(_run(req, timeout, warm), timeout)


def _verified(desktop: Desktop, spec: Verification) -> bool:
    if spec.window_exists is not None:
        titles = "\n".join(desktop.window_titles()).lower()
        if spec.window_exists.lower() not in titles:
            return False
    if spec.command_success is not None:
        try:
            check = subprocess.run(spec.command_success, shell=True, capture_output=True, timeout=5)
        except subprocess.TimeoutExpired:
            return False
        return check.returncode == 0
    return True


def execute_verified(
    req: VerifiedCommandRequest, desktop: Desktop, timeout: float, warm: WarmPython | None = None
) -> tuple[int, ExecuteResult]:
    """Run the command, then poll the verification until it holds or max_wait_time passes."""
    code, body = _as_execute(_run(req, timeout, warm), timeout)
    if code != status.HTTP_200_OK or req.verification is None:
        return code, body
    start = time.monotonic()
    while True:
        if _verified(desktop, req.verification):
            body.verification, body.wait_time = "passed", time.monotonic() - start
            return code, body
        if time.monotonic() - start + req.check_interval > req.max_wait_time:
            break
        time.sleep(req.check_interval)  # the caller's polling interval, part of the protocol
    body.status, body.verification, body.wait_time = (
        "verification_failed",
        "failed",
        req.max_wait_time,
    )
    return TIMEOUT, body


def run_python(req: RunPythonRequest, python: str, timeout: float) -> tuple[int, RunPythonResult]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="kubecua-run-") as script:
        script.write(req.code)
        script.flush()
        result = _start([python, script.name], timeout=timeout)
    error = result.error
    if result.timed_out:
        error = "TimeoutExpired"
    elif result.returncode != 0 and not error:
        error = f"Process exited with code {result.returncode}"
    message = "\n".join(part for part in (result.output, error) if part)
    if result.timed_out:
        message = f"Execution timeout: code ran longer than {timeout:g} s"
    body = RunPythonResult(
        status="success" if result.returncode == 0 and not result.timed_out else "error",
        message=message,
        output=result.output,
        error=error,
        return_code=result.returncode,
    )
    return (TIMEOUT if result.timed_out else status.HTTP_200_OK), body


def run_bash(req: RunBashRequest) -> tuple[int, RunBashResult]:
    cwd = None
    if req.working_dir:
        cwd = os.path.expanduser(req.working_dir)
        if not Path(cwd).is_dir():
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"working_dir is not a dir: {cwd}")
    script = req.script if "#!/bin/bash" in req.script else "#!/bin/bash\n\n" + req.script
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="kubecua-run-") as file:
        file.write(script)
        file.flush()
        result = _start(["/bin/bash", file.name], timeout=req.timeout, cwd=cwd, merge_stderr=True)
    if result.timed_out:
        output = f"Script execution timed out after {req.timeout:g} seconds"
        return TIMEOUT, RunBashResult(status="error", output=output, returncode=-1)
    body = RunBashResult(
        status="success" if result.returncode == 0 else "error",
        output=result.output,
        returncode=result.returncode,
    )
    return status.HTTP_200_OK, body
