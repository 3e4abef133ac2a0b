"""Turning an episode-API action into something the desktop runs. pyautogui code runs the way
OSWorld's PythonController runs it (python -c with pyautogui imported, FAILSAFE off); computer_13
dicts go through desktop-env's own PythonController.execute_action."""

from __future__ import annotations

import math
from typing import Any

from desktop_env.actions import ACTION_SPACE

from kubecua_sandbox_client import SPECIAL_ACTIONS

PYAUTOGUI_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False\n"
COMPUTER_13_TYPES = {a["action_type"] for a in ACTION_SPACE} | set(SPECIAL_ACTIONS)
PARAMETERS: dict[str, dict[str, dict[str, Any]]] = {
    a["action_type"]: a.get("parameters", {}) for a in ACTION_SPACE
}


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
            raise InvalidAction("action: pyautogui actions are python code strings")
        try:
            compile(action, "<action>", "exec")
        except SyntaxError as e:
            raise InvalidAction(f"action is not valid python: {e.msg} (line {e.lineno})") from e
        except (
            ValueError,
            MemoryError,
            RecursionError,
        ) as e:  # compile fails so too on some inputs
            raise InvalidAction(f"action is not valid python: {e}") from e
        return
    if not isinstance(action, dict):
        raise InvalidAction("action: computer_13 actions are dicts with an action_type")
    kind = action.get("action_type")
    # isinstance first: a list or dict action_type is unhashable and would break the set lookup.
    if not isinstance(kind, str) or kind not in COMPUTER_13_TYPES:
        raise InvalidAction(f"action.action_type must be one of {sorted(COMPUTER_13_TYPES)}")
    check_parameters(kind, action)


def check_parameters(kind: str, action: dict[str, Any]) -> None:
    """The parameters of a computer_13 action against desktop-env's ACTION_SPACE. Its
    execute_action pastes them into python source unchecked (a str x becomes code) and raises a
    bare Exception on a missing one, so anything it would not take cleanly is refused here."""
    if "parameters" in action:  # execute_action's other shape: {"action_type", "parameters"}
        params, where = action["parameters"], "action.parameters"
        if set(action) - {"action_type", "parameters"}:
            raise InvalidAction("action: give the parameters either inside 'parameters' or beside"
                                " action_type, not both")  # fmt: skip
        if not isinstance(params, dict):
            raise InvalidAction(f"{where} must be an object")
    else:
        params, where = {k: v for k, v in action.items() if k != "action_type"}, "action"
    spec = PARAMETERS.get(kind, {})
    for name in params:
        if name not in spec:
            raise InvalidAction(f"{where}.{name}: {kind} takes only {sorted(spec) or 'nothing'}")
    for name, rule in spec.items():
        if name not in params:
            if not rule.get("optional", False) and kind != "SCROLL":
                raise InvalidAction(f"{where}.{name} is required for {kind}")
            continue
        _check_value(f"{where}.{name}", params[name], rule)
    # execute_action's own combinations: x and y together; SCROLL needs dx or dy.
    if ("x" in params) != ("y" in params):
        raise InvalidAction(f"{where}.{'y' if 'x' in params else 'x'}: give x and y together")
    if kind == "CLICK" and "num_clicks" in params and not {"button", "x"} & set(params):
        raise InvalidAction(f"{where}.num_clicks needs a button or x and y with it")
    if kind == "SCROLL" and not {"dx", "dy"} & set(params):
        raise InvalidAction(f"{where}.dx or {where}.dy is required for SCROLL")


def _check_value(field: str, value: Any, rule: dict[str, Any]) -> None:
    kind, allowed = rule["type"], rule.get("range")
    if kind is float:
        # bool is an int; NaN and inf would reach pyautogui as names, not numbers. The upper
        # bound of ACTION_SPACE's range (1920x1080, a constant) is not applied: screens differ.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidAction(f"{field} must be a number")
        if not math.isfinite(value) or value < 0:
            raise InvalidAction(f"{field} must be a finite number >= 0")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidAction(f"{field} must be an integer")
        if allowed is not None and value not in allowed:
            raise InvalidAction(f"{field} must be one of {allowed}")
    elif kind is str:
        if not isinstance(value, str):
            raise InvalidAction(f"{field} must be a string")
        if allowed is not None and value.lower() not in allowed:
            raise InvalidAction(f"{field} must be one of the keys or values desktop-env accepts")
    elif kind is list:
        keys = allowed[0] if allowed else None
        if not isinstance(value, list) or not value:
            raise InvalidAction(f"{field} must be a non-empty list")
        for i, item in enumerate(value):
            if not isinstance(item, str) or (keys is not None and item.lower() not in keys):
                raise InvalidAction(f"{field}[{i}] must be one of desktop-env's key names")


def pyautogui_command(code: str) -> list[str]:
    return ["python3", "-c", PYAUTOGUI_PREFIX + code]
