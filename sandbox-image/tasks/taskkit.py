# ruff: noqa: E501  (setup commands are long literals)
"""Building blocks of task families (the offline suite's *_tasks.py tables and the generators
registered as plugins, kubecua_tasks/plugin.py): setup steps, checks, actions, and the files of
<area>/<id>.json plus <id>.solutions.json that `collect` hands back."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

H = "/home/user"


def write(path: str, text: str) -> dict:
    """A setup step that writes a text file on the desktop (python3 is there, as in OSWorld)."""
    code = f"import pathlib; p=pathlib.Path({path!r}); p.parent.mkdir(parents=True, exist_ok=True); p.write_text({text!r})"
    return {"type": "execute", "parameters": {"command": ["python3", "-c", code]}}


def sh(cmd: str) -> dict:
    return {"type": "execute", "parameters": {"command": cmd, "shell": True}}


def check(cmd: str, include: list[str], exclude: list[str] | None = None) -> dict:
    return {
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": cmd, "shell": True},
        "expected": {"type": "rule", "rules": {"include": include, "exclude": exclude or []}},
    }


def py(code: str) -> dict:
    """A pyautogui-space action: python run on the desktop, ~ is the desktop user's home."""
    return {
        "action": "import os, pathlib, shutil; HOME = pathlib.Path.home()\n" + code,
        "action_space": "pyautogui",
    }


def gui(code: str) -> dict:
    return {"action": code, "action_space": "pyautogui"}


DONE = {"action": "DONE", "action_space": "pyautogui"}
FAIL = {"action": "FAIL", "action_space": "pyautogui"}
TASKS: list[dict] = []
# Other files a table writes beside its tasks (a family's family.json), by path under tasks/.
FILES: dict[str, str] = {}


def task(
    area: str,
    tid: str,
    instruction: str,
    config: list,
    evaluator: dict,
    ref: list,
    wrong: list,
    apps: list[str] | None = None,
    folder: str | None = None,
    partial: dict | None = None,
    solutions: dict[str, list] | None = None,
) -> None:
    """Register a task; its files go to <folder or area>/<tid>.json (a family's split folders).
    `partial`: a desktop-env metric with a value in 0..1 (getter, func, expected, as in
    `evaluator`) that scores partial progress, for shaped rewards; success stays the evaluator's.
    `solutions`: further named action lists for <tid>.solutions.json beside reference and wrong
    (a family's demonstrator, which the recorder plays with --solution NAME), each ending DONE."""
    TASKS.append(
        {
            "area": area,
            "id": tid,
            "instruction": instruction,
            "config": config,
            "evaluator": evaluator,
            "related_apps": apps or ["terminal"],
            "reference": [*ref, DONE],
            "wrong": [*wrong, DONE],
            "folder": folder or area,
            "partial": partial,
            "solutions": {k: [*v, DONE] for k, v in (solutions or {}).items()},
        }
    )


def ok_if(test: str) -> str:
    """Shell check that prints OK only when `test` holds."""
    return f"if {test}; then echo OK; else echo NO; fi"


def write_bytes(path: str, data: bytes) -> dict:
    """A setup step that writes a binary file (an .xlsx/.docx built at generation time)."""
    b64 = base64.b64encode(data).decode()
    code = f"import base64, pathlib; p=pathlib.Path({path!r}); p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(base64.b64decode({b64!r}))"
    return {"type": "execute", "parameters": {"command": ["python3", "-c", code]}}


def wait_until(test: str, what: str, seconds: int = 60) -> dict:
    """A setup step that polls a shell test every 0.1 s: apps start asynchronously, and acting
    before their window exists types into nothing. Fails the setup after `seconds`."""
    loop = f"for i in $(seq {seconds * 10}); do {test} && exit 0; sleep 0.1; done; echo 'no {what}' >&2; exit 1"
    return {"type": "execute", "parameters": {"command": loop, "shell": True}}


# For reference solutions (python run on the desktop): the windows' titles, one per line, and a
# loop that polls a condition every 0.1 s for up to 30 s, as a careful agent looks before it acts.
WINDOWS = "subprocess.run(['wmctrl', '-l'], capture_output=True, text=True).stdout"
ACTIVE = "subprocess.run(['xdotool', 'getactivewindow', 'getwindowname'], capture_output=True, text=True).stdout"


def poll(condition: str) -> str:
    return f"for _ in range(300):\n    if {condition}: break\n    time.sleep(0.1)"


def wait_window(title: str) -> dict:
    return wait_until(f"wmctrl -l | grep -qF {title!r}", f"window {title}")


def launch(*argv: str) -> dict:
    return {"type": "launch", "parameters": {"command": list(argv)}}


def task_files() -> dict[str, str]:
    """Every task file's path under tasks/ and its text: <area>/<id>.json and its solutions."""
    files = {}
    for t in TASKS:
        body = {
            "id": t["id"],
            "snapshot": t["area"],
            "instruction": t["instruction"],
            "source": "kubecua",
            "config": t["config"],
            "trajectory": "trajectories/",
            "related_apps": t["related_apps"],
            "evaluator": t["evaluator"],
            **({"partial": t["partial"]} if t["partial"] else {}),
            "proxy": False,
            "difficulty": max(1, len(t["reference"]) - 1),
        }
        files[f"{t['folder']}/{t['id']}.json"] = json.dumps(body, indent=2) + "\n"
        sols = {"reference": t["reference"], "wrong": t["wrong"], **t["solutions"]}
        files[f"{t['folder']}/{t['id']}.solutions.json"] = json.dumps(sols, indent=2) + "\n"
    return {**files, **FILES}


def collect(build: Callable[[], object]) -> dict[str, str]:
    """The files that `build` registers (task() and FILES), path under the tasks folder -> text:
    the registry is emptied while it runs and put back after, so a family generated twice, or
    two families in one process, never see each other's tasks (kubecua_tasks.plugin)."""
    saved_tasks, saved_files = TASKS[:], dict(FILES)
    TASKS.clear()
    FILES.clear()
    try:
        build()
        return task_files()
    finally:
        TASKS[:] = saved_tasks
        FILES.clear()
        FILES.update(saved_files)


def wait_drawn(min_colors: int = 300, seconds: int = 90) -> dict:
    """A setup step that waits until the screen shows a drawn, still application: at least
    `min_colors` distinct colours (a window still loading is a flat grey box; toolbars and text
    bring hundreds) and two grabs 0.3 s apart are identical. LibreOffice maps its window seconds
    before it draws the document, and keys sent meanwhile are lost."""
    code = (
        "import sys, time\nfrom PIL import ImageChops, ImageGrab\nprev, end = None, time.time() + "
        + str(seconds)
        + "\n"
        "while time.time() < end:\n"
        "    img = ImageGrab.grab().convert('RGB')\n"
        "    n = len(img.getcolors(1 << 24) or [])\n"
        "    if n >= "
        + str(min_colors)
        + " and prev is not None and ImageChops.difference(img, prev).getbbox() is None:\n"
        "        print(n); sys.exit(0)\n"
        "    prev = img; time.sleep(0.3)\n"
        "sys.exit('screen never settled')"
    )
    return {"type": "execute", "parameters": {"command": ["python3", "-c", code]}}
