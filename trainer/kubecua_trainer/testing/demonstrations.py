"""Demonstrations for the demo's warm start: the offline suite's solutions as agent-format samples.

Each task of sandbox-image/tasks has beside it `<id>.solutions.json` with a `reference` solution
(it succeeds) and a near-miss `wrong` one (it fails the evaluator), both lists of episode-API
StepRequests. `render_demo` turns one of them into exactly the token sequence an episode of the
rollout would produce in trajectory mode: the system prompt, `Task: ...` + a screenshot, the reply
that carries the action and <|im_end|> (mask 1), `Turn 2. ...` + a screenshot, and so on.
Screenshots are synthetic desktop-like images (no desktop needed to build the demo model); the
warm start shows many different ones so the tiny model learns to ignore them. They imitate the
local desktops (a gradient wallpaper, a few windows): a tiny model trained only on, say, random
rectangles acted on the real desktops as if it saw another task.
Only solutions in the agent's action space are usable (pyautogui calls, DONE/FAIL/WAIT) once the
reference scripts' waits are left out (agent_step); the file tasks' solutions assign variables
(`HOME = ...`), which the agent may not, and are refused.
"""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageOps

from kubecua_trainer.engines.base import Generation
from kubecua_trainer.model import Policy
from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    next_user_text,
    parse_action,
    reply_text,
    system_prompt,
)
from kubecua_trainer.tokens import Conversation, Sample, fit_image


@dataclass(frozen=True)
class Demo:
    """One task with its two solutions as reply texts, one per turn."""

    task_id: str
    instruction: str
    reference: list[str]
    wrong: list[str]


def load_demos(tasks_dir: Path, ids: list[str]) -> list[Demo]:
    """The demos of tasks `ids`; ValueError naming the task when one cannot be used."""
    found = {p.name.removesuffix(".json"): p for p in tasks_dir.rglob("*.json")}
    demos = []
    for tid in ids:
        if tid not in found or f"{tid}.solutions" not in found:
            raise ValueError(f"task {tid}: no {tid}.json with {tid}.solutions.json in {tasks_dir}")
        task = json.loads(found[tid].read_text())
        solutions = json.loads(found[f"{tid}.solutions"].read_text())
        replies = {
            k: [reply_text(agent_step(s["action"])) for s in solutions[k]]
            for k in ("reference", "wrong")
        }
        for kind, texts in replies.items():
            for text in texts:
                try:
                    parse_action(text)
                except ParseError as err:
                    raise ValueError(
                        f"task {tid}: {kind} step not an agent action: {err}"
                    ) from None
        demos.append(Demo(tid, str(task["instruction"]), replies["reference"], replies["wrong"]))
    return demos


def agent_step(wire: str) -> str:
    r"""A solution step as the agent sends it: without the waits a reference script adds for the
    desktop (imports, `time.sleep`, loops that poll and act on nothing), since an agent waits by
    taking another turn. Anything else stays, and parse_action refuses what is not an action.

    >>> agent_step("import time\npyautogui.press('f5')\nwhile busy():\n    time.sleep(1)")
    "pyautogui.press('f5')"
    """
    try:
        tree = ast.parse(wire)
    except SyntaxError:
        return wire
    kept = [stmt for stmt in tree.body if not _is_wait(stmt)]
    return "\n".join(ast.unparse(stmt) for stmt in kept) if kept != tree.body else wire


def _is_wait(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return True
    if isinstance(stmt, ast.For | ast.While):  # a poll, unless it acts on the desktop
        calls = [ast.unparse(n.func) for n in ast.walk(stmt) if isinstance(n, ast.Call)]
        return not any(c.startswith("pyautogui.") for c in calls)
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and ast.unparse(call.func) == "time.sleep"


def synthetic_screen(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """A desktop-like picture: a vertical two-colour gradient (as the local desktops' wallpaper)
    with 0-3 random light 'windows' holding lines of dark 'text'."""

    def colour(lo: int, hi: int) -> tuple[int, int, int]:
        return (rng.randrange(lo, hi), rng.randrange(lo, hi), rng.randrange(lo, hi))

    ramp = Image.linear_gradient("L").resize(size)
    img = ImageOps.colorize(ramp, colour(0, 256), colour(0, 256))
    draw = ImageDraw.Draw(img)
    w, h = size
    for _ in range(rng.randrange(4)):
        x0, y0 = rng.randrange(w // 2), rng.randrange(h // 2)
        x1, y1 = x0 + rng.randrange(w // 8, w // 2), y0 + rng.randrange(h // 8, h // 2)
        draw.rectangle((x0, y0, x1, y1), fill=colour(150, 256))
        draw.rectangle((x0, y0, x1, y0 + 4), fill=colour(0, 256))  # title bar
        for y in range(y0 + 8, y1 - 2, 6):
            draw.line((x0 + 3, y, x0 + 3 + rng.randrange(max(1, x1 - x0 - 6)), y), fill=(0, 0, 0))
    return img


def render_demo(
    policy: Policy,
    instruction: str,
    replies: list[str],
    rng: random.Random,
    screen_size: tuple[int, int],
    max_pixels: int,
) -> Sample:
    """One trajectory-mode sample: the episode loop's exact prompts, the replies trained (mask 1).

    With screen 1920x1080 and maxPixels 50176 the model sees 280x168 images, as in the rollout."""
    # Drawn at the size the model sees a screen_size desktop, so nothing is resized again.
    shown = fit_image(Image.new("RGB", screen_size), policy, max_pixels).size
    screens = [synthetic_screen(rng, shown) for _ in replies]
    conv = Conversation(policy, system_prompt(*screens[0].size), max_pixels)
    im_end = int(policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    for turn_no, (reply, image) in enumerate(zip(replies, screens, strict=True), start=1):
        text = first_user_text(instruction) if turn_no == 1 else next_user_text(turn_no)
        conv.add_user(text, image)
        ids = [*policy.tokenizer(reply, add_special_tokens=False)["input_ids"], im_end]
        conv.add_generation(Generation(ids, [0.0] * len(ids), "stop"))
    return conv.to_sample()
