"""Command routes: output and return codes, timeouts that kill the whole process group."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Desktop, run, wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); treat it as dead.
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]


def test_execute_returns_output_error_and_returncode(desktop: Desktop) -> None:
    body = run(desktop, ["bash", "-c", "echo out; echo err >&2; exit 3"])
    assert body == {"status": "success", "output": "out\n", "error": "err\n", "returncode": 3}


def test_execute_splits_a_string_and_expands_home(desktop: Desktop) -> None:
    (desktop.home / "hello.txt").write_text("hi there")
    assert run(desktop, "cat ~/hello.txt")["output"] == "hi there"


def test_setup_execute_with_shell(desktop: Desktop) -> None:
    response = desktop.client.post(
        "/setup/execute", json={"command": "echo $((6*7))", "shell": True}
    )
    assert response.json()["output"] == "42\n"


def test_background_child_does_not_hold_the_response(desktop: Desktop) -> None:
    # The child keeps stdout open for 30 s; the answer must not wait for it.
    body = run(desktop, "sleep 30 & echo started", shell=True)
    assert body["output"] == "started\n"


def test_timeout_kills_the_process_group(desktop: Desktop, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    response = desktop.client.post("/run_bash_script", json={"script": script, "timeout": 1})
    assert response.status_code == 504
    body = response.json()
    assert body["returncode"] == -1
    assert "timed out after 1 seconds" in body["output"]
    child = int(pidfile.read_text())
    wait_for(lambda: not _alive(child), 10, "the background sleep to be killed")


def test_run_python_returns_output_and_return_code(desktop: Desktop) -> None:
    ok = desktop.client.post("/run_python", json={"code": "print(sum(range(10)))"}).json()
    assert (ok["status"], ok["output"], ok["return_code"]) == ("success", "45\n", 0)
    bad = desktop.client.post("/run_python", json={"code": "raise SystemExit(7)"}).json()
    assert (bad["status"], bad["return_code"]) == ("error", 7)
    assert bad["error"] == "Process exited with code 7"


def test_run_python_has_pyautogui(desktop: Desktop) -> None:
    code = "import pyautogui; print(pyautogui.size())"
    body = desktop.client.post("/run_python", json={"code": code}).json()
    assert body["output"].strip() == "Size(width=1280, height=720)"


def test_run_bash_script_merges_stderr_and_uses_working_dir(desktop: Desktop) -> None:
    body = desktop.client.post(
        "/run_bash_script", json={"script": "pwd; echo oops >&2; exit 2", "working_dir": "~"}
    ).json()
    assert body == {
        "status": "error", "output": f"{desktop.home}\noops\n", "error": "", "returncode": 2
    }  # fmt: skip


def test_run_bash_script_missing_working_dir_is_400(desktop: Desktop) -> None:
    body = {"script": "true", "working_dir": "/nonexistent/kubecua"}
    assert desktop.client.post("/run_bash_script", json=body).status_code == 400


def test_execute_with_verification_passes_when_check_holds(desktop: Desktop) -> None:
    marker = desktop.home / "verified"
    body = {
        "command": ["touch", str(marker)],
        "verification": {"command_success": f"test -f {marker}"},
        "max_wait_time": 5,
        "check_interval": 0.2,
    }
    response = desktop.client.post("/setup/execute_with_verification", json=body)
    assert response.status_code == 200
    assert response.json()["verification"] == "passed"


def test_execute_with_verification_fails_when_window_never_appears(desktop: Desktop) -> None:
    body = {
        "command": ["true"],
        "verification": {"window_exists": "no-such-window-kubecua"},
        "max_wait_time": 1,
        "check_interval": 0.2,
    }
    response = desktop.client.post("/execute_with_verification", json=body)
    assert response.status_code == 504
    assert (response.json()["status"], response.json()["verification"]) == (
        "verification_failed", "failed"
    )  # fmt: skip


def test_commands_do_not_see_the_token(desktop: Desktop) -> None:
    body = run(desktop, "echo token=${KUBECUA_SANDBOX_TOKEN:-unset}", shell=True)
    assert body["output"] == "token=unset\n"
