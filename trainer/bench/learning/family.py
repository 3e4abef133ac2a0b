"""A task family as the learning benchmark sees it: a folder that a generator under
sandbox-image/tasks/ wrote (colourkeys_tasks.py, typeword_tasks.py), holding train/ and heldout/
task JSONs with their reference solutions and family.json (its parameters, the warm-up's
instance ids, the rollout settings its screens need). From it: the splits, the tokenizer corpus
that makes every instruction and reply word one token, and the offline reward of a list of
replies (would these actions solve the instance on the desktop?). Nothing about one family is
written here: `--family FOLDER` picks one (default colourkeys-quits)."""

from __future__ import annotations

import ast
import difflib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    next_user_text,
    parse_action,
    reply_text,
    system_prompt,
)

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "sandbox-image/tasks"
DEFAULT = TASKS / "colourkeys-quits"  # make bench-learning's family (colourkeys_quits_tasks.py)
SPLITS = ("train", "heldout")
# The runs' system prompt (spec.rollout.systemPrompt): the first line of the agent's own. With
# the whole 175-token prompt, the 2-layer model must find the task past it, and its warm-up
# stayed on a memorising plateau; with this one it learns (docs/benchmarks.md, 2026-11-25).
BENCH_PROMPT = "You control a Linux desktop with mouse and keyboard to complete a task."


@dataclass(frozen=True)
class Family:
    folder: Path

    @cached_property
    def meta(self) -> dict[str, Any]:
        path = self.folder / "family.json"
        if not path.exists():
            raise ValueError(f"{path} is missing: {self.folder} is not a task family folder")
        return dict(json.loads(path.read_text()))

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def warmup_ids(self) -> list[str]:
        return [str(x) for x in self.meta["warmup"]]

    @property
    def warmup_solution(self) -> str:
        """The solutions entry the warm-up's demonstrations are played from: "reference", or
        a family's biased demonstrator (family.json warmupSolution; colourkeys_tasks.py)."""
        return str(self.meta.get("warmupSolution", "reference"))

    @property
    def max_pixels(self) -> int:
        return int(self.meta["rollout"]["maxPixels"])

    @property
    def max_turns(self) -> int:
        return int(self.meta["rollout"]["maxTurns"])

    def split(self, split: str) -> list[dict[str, Any]]:
        """The tasks of one split with their reference solutions (`reference` key) and what the
        warm-up's demonstrator does on them (`demonstration`; the reference unless the family
        names another solution), by id."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        tasks = []
        for path in sorted((self.folder / split).glob("*.json")):
            if path.name.endswith(".solutions.json"):
                continue
            task = json.loads(path.read_text())
            sols = json.loads(path.with_suffix(".solutions.json").read_text())
            task["reference"] = sols["reference"]
            task["demonstration"] = sols.get(self.warmup_solution, sols["reference"])
            tasks.append(task)
        return tasks

    def warmup_tasks(self) -> list[dict[str, Any]]:
        by_id = {t["id"]: t for t in self.split("train")}
        return [by_id[i] for i in self.warmup_ids]

    def corpus(self) -> list[str]:
        """Tokenizer text: the prompt the agent reads and every instance's instruction, turn
        lines and replies."""
        lines = [system_prompt(224, 224), "DONE"]
        lines += [next_user_text(t) for t in range(2, self.max_turns + 2)]
        for split in SPLITS:
            for task in self.split(split):
                lines += [first_user_text(task["instruction"]), *reference_replies(task)]
        return lines

    def screen(self, task: dict[str, Any], typed: int = 0) -> Image.Image | None:
        """The instance's screen after `typed` keys, drawn as its window draws it (families of
        coloured squares, family.json `symbols` and `layout`: the squares still to press from
        the left), for offline runs; None for other families."""
        if "layout" not in self.meta:
            return None
        lay, colours = self.meta["layout"], {s["key"]: s["colour"] for s in self.meta["symbols"]}
        w, h = 1920, 1080
        img = Image.new("RGB", (w, h), lay["background"])
        draw = ImageDraw.Draw(img)
        y0, y1 = h * lay["row"] // lay["rows"], h * (lay["row"] + 1) // lay["rows"]
        for i, key in enumerate(expected_text(task)[typed:]):
            x0, x1 = w * i // lay["cols"], w * (i + 1) // lay["cols"]
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=colours[key])
        return img


def load(folder: str | Path | None = None) -> Family:
    return Family(Path(folder).resolve() if folder else DEFAULT)


def reference_replies(task: dict[str, Any], solution: str = "reference") -> list[str]:
    """The replies that carry the instance's reference actions (or those of another solution
    entry that Family.split loaded, e.g. "demonstration"), DONE left out."""
    return [reply_text(a["action"]) for a in task[solution] if a["action"] != "DONE"]


def expected_text(task: dict[str, Any]) -> str:
    return str(task["evaluator"]["expected"]["rules"]["expected"])


def typed_text(reply: str) -> str | None:
    """What the reply's action would type on the desktop (None: not a typing action).

    >>> typed_text('```python\\npyautogui.write("apple")\\n```')
    'apple'
    >>> typed_text("```python\\npyautogui.press('r')\\n```")
    'r'
    >>> typed_text("DONE") is None
    True
    """
    try:
        action = parse_action(reply)
    except ParseError:
        return None
    if action.kind != "code":
        return None
    typed = []
    for stmt in ast.parse(action.code).body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        name = ast.unparse(call.func) if isinstance(call, ast.Call) else ""
        if name not in ("pyautogui.write", "pyautogui.typewrite", "pyautogui.press"):
            continue
        assert isinstance(call, ast.Call)
        arg = call.args[0] if call.args else None
        text = arg.value if isinstance(arg, ast.Constant) else None
        if isinstance(text, str) and (name != "pyautogui.press" or len(text) == 1):
            typed.append(text)  # press('enter') types no text
    return "".join(typed) if typed else None


def offline_reward(task: dict[str, Any], replies: list[str], fuzzy: bool = False) -> float:
    """The desktop's check of what the replies would type: exact (1.0 or 0.0), or with `fuzzy`
    the similarity 2*matches/(len(typed)+len(expected)), the formula of desktop-env's
    fuzzy_match (rapidfuzz's ratio; difflib's blocks can differ from it on odd strings)."""
    typed = "".join(t for t in (typed_text(r) for r in replies) if t)
    expected = expected_text(task)
    if not fuzzy:
        return 1.0 if typed == expected else 0.0
    return difflib.SequenceMatcher(None, typed, expected).ratio()
