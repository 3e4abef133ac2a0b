"""Turning an episode-API action into something the desktop runs. pyautogui code runs the way
OSWorld's PythonController runs it (python -c with pyautogui imported, FAILSAFE off); computer_13
dicts go through desktop-env's own PythonController.execute_action."""

from __future__ import annotations

from typing import Any

from desktop_env.actions import ACTION_SPACE

from kubecua_sandbox_client import SPECIAL_ACTIONS

PYAUTOGUI_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False\n"
COMPUTER_13_TYPES = {a["action_type"] for a in ACTION_SPACE} | set(SPECIAL_ACTIONS)


class InvalidAction(ValueError):
    """The action cannot be run at all (wrong shape, syntax error); the episode is unchanged."""


def special(action: str | dict[str, Any]) -> str | None:
    """'DONE' / 'FAIL' / 'WAIT' in either action space, else None."""
    if isinstance(action, str) and action.strip() in SPECIAL_ACTIONS:
        return action.strip()
    if isinstance(action, dict) and action.get("action_type") in SPECIAL_ACTIONS:
        return str(action["action_type"])
    return None


def check(action: str | dict[str, Any], space: str) -> None:
    if space == "pyautogui":
        if not isinstance(action, str):
            raise InvalidAction("pyautogui actions are python code strings")
        try:
            compile(action, "<action>", "exec")
        except SyntaxError as e:
            raise InvalidAction(f"action is not valid python: {e.msg} (line {e.lineno})") from e
        return
    if not isinstance(action, dict) or action.get("action_type") not in COMPUTER_13_TYPES:
        raise InvalidAction(
            f"computer_13 actions are dicts with action_type in {sorted(COMPUTER_13_TYPES)}"
        )


def pyautogui_command(code: str) -> list[str]:
    return ["python3", "-c", PYAUTOGUI_PREFIX + code]
